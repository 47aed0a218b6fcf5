//! Work in progress: the `random` kernel family's launch wrappers.
