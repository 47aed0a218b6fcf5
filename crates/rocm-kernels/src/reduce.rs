//! Work in progress: the `reduce` kernel family's launch wrappers.
