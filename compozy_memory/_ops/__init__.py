"""Operating tools: ACL lines and the command line."""
