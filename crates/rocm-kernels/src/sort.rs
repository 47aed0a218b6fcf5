//! Work in progress: the `sort` kernel family's launch wrappers.
