"""Operating tools: ACL lines, the command line and its MCP server, the importer."""
