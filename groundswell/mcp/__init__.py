"""MCP servers: local ones (stdio or in-process) as tools, remote ones for the API's connector.

- `config`: server configs and the request shapes of remote servers;
- `bridge`, `session`: starting local servers, and keeping them running across prompts;
- `client`, `capabilities`, `sampling`: what Groundswell's MCP client offers servers
  (elicitation, sampling, roots) and does with what they send;
- `tools`, `resources`, `content`, `calls`: a server's tools, resources and prompts
  as the agent's tools, their results as content blocks, and their deadlines;
- `middleware`: the default middleware that mounts an agent's servers.
"""
