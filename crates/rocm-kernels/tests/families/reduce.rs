// Work in progress: GPU tests of the `reduce` family (a module of tests/gpu.rs).
