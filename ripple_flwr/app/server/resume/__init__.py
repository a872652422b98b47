"""A method's state between rounds as plain data, and its restoring from a resume file."""
