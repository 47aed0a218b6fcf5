// Work in progress: GPU tests of the `sort` family (a module of tests/gpu.rs).
