//! [`Secret`]: a value that must never reach a log, a panic message or an error text by
//! accident. `Debug` prints only a marker, there is no `Display`, and the value is read through
//! [`Secret::expose`], so every use is visible at its call site. Any thread.

use std::fmt;

/// A secret value (an access token, an API key). Wrap it where it enters (configuration) and
/// expose it only where it is used (comparing a token, sending a key).
/// Wiped when dropped, so a value the server no longer needs leaves no copy behind.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret<T: zeroize::Zeroize>(T);

impl<T: zeroize::Zeroize> Drop for Secret<T> {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl<T: zeroize::Zeroize> Secret<T> {
    pub(crate) fn new(value: T) -> Secret<T> {
        Secret(value)
    }

    /// The value itself, for the one place that needs it.
    pub(crate) fn expose(&self) -> &T {
        &self.0
    }
}

/// `"[REDACTED]"`, quoted like the string it stands for (the marker `util::redact` and the
/// secrets registry put in place of a secret), whatever the value.
impl<T: zeroize::Zeroize> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt("[REDACTED]", f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_expose_shows_the_value() {
        let s = Secret::new("hunter2-secret".to_string());
        assert_eq!(format!("{s:?}"), r#""[REDACTED]""#);
        assert_eq!(format!("{:?}", Some(&s)), r#"Some("[REDACTED]")"#);
        assert_eq!(format!("{s:#?}"), r#""[REDACTED]""#);
        assert_eq!(s.expose(), "hunter2-secret");
        assert_eq!(s.clone(), s);
    }
}
