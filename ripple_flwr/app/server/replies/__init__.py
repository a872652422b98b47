"""Every client reply, converted and checked in one place: the fields, the training and
evaluation replies, the defences every training reply passes, and the count of DP releases."""
