//! `${{ ... }}` in a workflow: the contexts and functions the rehearsal knows (`matrix.*`,
//! `github.*`, `runner.*`, `env.*`, `hashFiles(...)`) and step conditions (`success()`,
//! `failure()`, `always()`, `cancelled()`). Anything else is an error naming the expression.

use std::path::Path;

use crate::hash_files::{HashFilesError, hash_files};
use crate::workflow::Env;

/// Why an expression cannot be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum ExpressionError {
    #[error("`${{{{ {0} }}}}` is not something the rehearsal can evaluate")]
    Unsupported(String),
    #[error("an unclosed `${{{{` in {0:?}")]
    Unclosed(String),
    #[error(transparent)]
    HashFiles(#[from] HashFilesError),
}

/// What an expression can see.
pub struct Context<'a> {
    pub workflow: &'a str,
    pub job_id: &'a str,
    pub matrix: &'a Env,
    pub env: &'a Env,
    pub workspace: &'a Path,
    pub runner_temp: &'a Path,
    pub sha: &'a str,
}

/// `text` with every `${{ expr }}` replaced by its value.
pub fn substitute(text: &str, context: &Context) -> Result<String, ExpressionError> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 3..];
        let end = after
            .find("}}")
            .ok_or_else(|| ExpressionError::Unclosed(text.to_string()))?;
        out.push_str(&evaluate(after[..end].trim(), context)?);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of one expression.
pub fn evaluate(expression: &str, context: &Context) -> Result<String, ExpressionError> {
    let unsupported = || ExpressionError::Unsupported(expression.to_string());
    if let Some(arguments) = expression
        .strip_prefix("hashFiles(")
        .and_then(|r| r.strip_suffix(')'))
    {
        let patterns = string_arguments(arguments).ok_or_else(unsupported)?;
        return Ok(hash_files(context.workspace, &patterns)?);
    }
    let (scope, name) = expression.split_once('.').ok_or_else(unsupported)?;
    let value = match (scope, name) {
        ("matrix", name) => context.matrix.get(name).cloned(),
        ("env", name) => context.env.get(name).cloned(),
        ("github", "job") => Some(context.job_id.to_string()),
        ("github", "workflow") => Some(context.workflow.to_string()),
        ("github", "sha") => Some(context.sha.to_string()),
        ("github", "ref") => Some("refs/heads/rehearsal".to_string()),
        ("github", "event_name") => Some("pull_request".to_string()),
        ("github", "workspace") => Some(context.workspace.display().to_string()),
        ("runner", "os") => Some("Linux".to_string()),
        ("runner", "temp") => Some(context.runner_temp.display().to_string()),
        _ => None,
    };
    value.ok_or_else(unsupported)
}

/// `'a', 'b'` as its strings; `None` when it is anything else.
fn string_arguments(text: &str) -> Option<Vec<String>> {
    text.split(',')
        .map(|part| {
            let part = part.trim();
            part.strip_prefix('\'')?.strip_suffix('\'').map(str::to_string)
        })
        .collect()
}

/// Whether a step runs: its `if:` (`None` is `success()`) given whether an earlier step failed.
pub fn condition_holds(condition: Option<&str>, job_failed: bool) -> Result<bool, ExpressionError> {
    let Some(condition) = condition else {
        return Ok(!job_failed);
    };
    let inner = condition.trim();
    let inner = inner
        .strip_prefix("${{")
        .and_then(|r| r.strip_suffix("}}"))
        .unwrap_or(inner)
        .trim();
    match inner {
        "success()" => Ok(!job_failed),
        "failure()" => Ok(job_failed),
        "always()" | "!cancelled()" => Ok(true),
        "cancelled()" => Ok(false),
        _ => Err(ExpressionError::Unsupported(inner.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn with_context<T>(f: impl FnOnce(&Context) -> T) -> T {
        let matrix: Env = [("slug".to_string(), "rest".to_string())].into();
        let env: Env = [("FOO".to_string(), "bar".to_string())].into();
        let workspace = PathBuf::from("/nonexistent-workspace");
        let temp = PathBuf::from("/tmp/runner");
        f(&Context {
            workflow: "ci",
            job_id: "test",
            matrix: &matrix,
            env: &env,
            workspace: &workspace,
            runner_temp: &temp,
            sha: "abc",
        })
    }

    #[test]
    fn contexts_are_substituted_in_text() {
        let text = with_context(|c| {
            substitute(
                "cargo-${{ runner.os }}-${{ github.job }}-${{matrix.slug}}-${{ env.FOO }}",
                c,
            )
        });
        assert_eq!(text.unwrap(), "cargo-Linux-test-rest-bar");
    }

    #[test]
    fn hash_files_of_nothing_is_empty_and_unknown_expressions_are_named() {
        assert_eq!(
            with_context(|c| substitute("k-${{ hashFiles('Cargo.lock') }}", c)).unwrap(),
            "k-"
        );
        let err = with_context(|c| substitute("${{ secrets.TOKEN }}", c))
            .unwrap_err()
            .to_string();
        assert!(err.contains("secrets.TOKEN"), "{err}");
        let err = with_context(|c| substitute("${{ matrix.nope }}", c))
            .unwrap_err()
            .to_string();
        assert!(err.contains("matrix.nope"), "{err}");
        assert!(with_context(|c| substitute("${{ oops", c)).is_err());
    }

    #[test]
    fn conditions_follow_the_jobs_state() {
        assert!(condition_holds(None, false).unwrap());
        assert!(!condition_holds(None, true).unwrap());
        assert!(condition_holds(Some("always()"), true).unwrap());
        assert!(condition_holds(Some("${{ failure() }}"), true).unwrap());
        assert!(!condition_holds(Some("failure()"), false).unwrap());
        assert!(condition_holds(Some("github.ref == 'x'"), false).is_err());
    }
}
