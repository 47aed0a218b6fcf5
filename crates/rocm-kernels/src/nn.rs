//! Work in progress: the `nn` kernel family's launch wrappers.
