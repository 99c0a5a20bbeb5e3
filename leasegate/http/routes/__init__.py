"""The API's routes, a module per resource: requests → actor messages → JSON."""
