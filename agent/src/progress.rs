//! Progress without printing: the lifecycle reports each step through a [`Progress`] sink, and
//! the command line turns it into lines (the library itself writes nothing to stdout).

/// Where progress lines go.
pub trait Progress {
    fn line(&self, text: &str);
}

impl<F: Fn(&str)> Progress for F {
    fn line(&self, text: &str) {
        self(text)
    }
}

/// A sink that keeps nothing (tests, callers that do not care).
pub fn quiet() -> impl Progress {
    |_: &str| {}
}
