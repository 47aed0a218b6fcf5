//! PLACEHOLDER: the amd driver is being written.
use crate::error::{Error, Result};

/// Loads the amd driver.
pub(crate) fn load() -> Result<Box<dyn super::Driver>> {
    Err(Error::Platform("the amd driver is not built yet".into()))
}
