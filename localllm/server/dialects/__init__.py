"""One module per API dialect: a pure request translator into the conversation core
(``server/conversation.py``) and a stream renderer of its deltas, plus the routes."""
