// Work in progress: GPU tests of the `pool` family (a module of tests/gpu.rs).
