"""The server's plumbing: connections, the request pipeline before a route (auth, limits,
held long-polls, Expect handling, body bounds), error envelopes and the wire format."""
