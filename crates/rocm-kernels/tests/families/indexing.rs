// Work in progress: GPU tests of the `indexing` family (a module of tests/gpu.rs).
