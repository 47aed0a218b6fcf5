//! Work in progress: the `pool` kernel family's launch wrappers.
