//! Work in progress: the `indexing` kernel family's launch wrappers.
