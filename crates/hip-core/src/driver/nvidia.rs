//! PLACEHOLDER: the nvidia driver is being written.
use crate::error::{Error, Result};

/// Loads the nvidia driver.
pub(crate) fn load() -> Result<Box<dyn super::Driver>> {
    Err(Error::Platform("the nvidia driver is not built yet".into()))
}
