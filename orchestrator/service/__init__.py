"""The multi-user service: `leasewise serve`'s HTTP API over one scheduler kept in memory, who may do
what, and the client the CLI uses to talk to it."""
