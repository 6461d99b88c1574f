"""One C file per subgraph: the op functions, the entry and its workspace plan, the helpers
the C defines for itself, and the dynamic batch's wrapping."""
