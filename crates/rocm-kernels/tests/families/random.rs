// Work in progress: GPU tests of the `random` family (a module of tests/gpu.rs).
