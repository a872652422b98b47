"""The wire protocol between the server and the clients: the only module both sides share.

Message types and their keys, written once, with typed codecs for every request and reply
(:mod:`.messages`), and the array codec (:mod:`.records`).
"""
