//! Configuration errors: each names the JSON path of the field at fault.

use std::fmt;

/// One problem in a configuration, at one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path of the field, e.g. `static_resources.clusters[2].lb_policy`;
    /// empty when the error concerns the whole document.
    pub path: String,
    /// What is wrong, in words a config author can act on.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in one configuration, in the order they were found.
///
/// Loading does not stop at the first error: a config author sees them all at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The individual problems; never empty.
    pub errors: Vec<FieldError>,
}

impl ConfigError {
    /// An error with a single problem.
    pub fn single(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            errors: vec![FieldError {
                path: path.into(),
                message: message.into(),
            }],
        }
    }

    /// The paths of all problems, in order (handy in tests).
    pub fn paths(&self) -> Vec<&str> {
        self.errors.iter().map(|e| e.path.as_str()).collect()
    }

    /// Prefixes every path with `prefix` (used when a resource is nested in a file).
    pub fn prefixed(mut self, prefix: &str) -> Self {
        for e in &mut self.errors {
            e.path = if e.path.is_empty() {
                prefix.to_string()
            } else if e.path.starts_with('[') {
                format!("{prefix}{}", e.path)
            } else {
                format!("{prefix}.{}", e.path)
            };
        }
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
