"""The Hosts place."""
