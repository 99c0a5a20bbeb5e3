"""The actor runtime: typed refs and messages (``mailbox``), inboxes, the turn
context handlers take (``turn``), handler registries (``handlers``), parked
long-polls (``parking``), batches, periodic jobs, and the loop (``actor``)."""
