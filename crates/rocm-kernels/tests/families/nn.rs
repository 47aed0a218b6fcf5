// Work in progress: GPU tests of the `nn` family (a module of tests/gpu.rs).
