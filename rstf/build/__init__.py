"""From generated sources to a loaded op: the compiler and its cache, the C++ op wrapper, the
splice of the custom ops into the graph, and running one subgraph's C directly."""
