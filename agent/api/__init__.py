"""The agent's job API: the connection gate both HTTP ports share, the API's handlers and
server, and the HTTP client that ``joulestat run`` and ``track()`` talk to it with."""
