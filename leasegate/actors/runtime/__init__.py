"""The actor runtime: typed refs and messages (``mailbox``), inboxes, the turn
context handlers take (``turn``), handler registries (``handlers``), waiting
long-polls (``waiters``), batches, periodic jobs, and the loop (``actor``)."""
