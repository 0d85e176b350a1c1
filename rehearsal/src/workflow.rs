//! The workflow file read into jobs, their needs, matrix and steps: the part of GitHub Actions'
//! syntax the rehearsal runs. Anything else it would have to guess at is an error naming where.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

/// Environment variables, or any name → text map (a matrix combination, a step's `with`).
pub type Env = BTreeMap<String, String>;

/// Why a workflow cannot be rehearsed.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not YAML: {source}")]
    Yaml {
        path: PathBuf,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("{path}: {at}: {what}")]
    Shape { path: PathBuf, at: String, what: String },
}

/// A workflow: its name, env, default shell and jobs in file order.
#[derive(Clone, Debug)]
pub struct Workflow {
    pub name: String,
    pub env: Env,
    pub default_shell: Option<String>,
    pub jobs: Vec<Job>,
}

/// One job of the workflow (before its matrix is expanded).
#[derive(Clone, Debug)]
pub struct Job {
    pub id: String,
    /// `name:`, which may use `${{ matrix.* }}`.
    pub name: Option<String>,
    pub needs: Vec<String>,
    pub env: Env,
    pub timeout_minutes: Option<u64>,
    /// The matrix's combinations; empty when the job has no matrix.
    pub matrix: Vec<Env>,
    pub steps: Vec<Step>,
}

/// One step.
#[derive(Clone, Debug)]
pub struct Step {
    pub name: Option<String>,
    /// `if:`; `None` is `success()`.
    pub condition: Option<String>,
    pub env: Env,
    pub action: StepAction,
}

/// What a step does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepAction {
    /// A `run:` script, with its `shell:` if it names one.
    Run { script: String, shell: Option<String> },
    /// A `uses:` action (`owner/name@ref`) with its `with:` inputs.
    Uses { action: String, with: Env },
}

impl Step {
    /// The step's name as the runner shows it.
    pub fn title(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        match &self.action {
            StepAction::Run { script, .. } => format!("Run {}", script.lines().next().unwrap_or("")),
            StepAction::Uses { action, .. } => format!("Run {action}"),
        }
    }
}

impl Workflow {
    /// Reads and checks the workflow at `path`.
    pub fn read(path: &Path) -> Result<Workflow, WorkflowError> {
        let text = std::fs::read_to_string(path).map_err(|source| WorkflowError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Workflow::parse(path, &text)
    }

    /// Parses `text` (read from `path`, named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Workflow, WorkflowError> {
        let root: Value = serde_yaml_ng::from_str(text).map_err(|source| WorkflowError::Yaml {
            path: path.to_path_buf(),
            source,
        })?;
        let shape = |at: &str, what: String| WorkflowError::Shape {
            path: path.to_path_buf(),
            at: at.to_string(),
            what,
        };
        let jobs_value = root["jobs"]
            .as_mapping()
            .ok_or_else(|| shape("jobs", "missing or not a mapping".into()))?;
        let mut jobs = Vec::new();
        for (id, value) in jobs_value {
            let id = scalar(id).ok_or_else(|| shape("jobs", "a job id that is not text".into()))?;
            jobs.push(read_job(&id, value).map_err(|(at, what)| shape(&format!("jobs.{id}{at}"), what))?);
        }
        for job in &jobs {
            for need in &job.needs {
                if !jobs.iter().any(|j| &j.id == need) {
                    return Err(shape(
                        &format!("jobs.{}.needs", job.id),
                        format!("no job `{need}`"),
                    ));
                }
            }
        }
        Ok(Workflow {
            name: root["name"].as_str().unwrap_or("workflow").to_string(),
            env: map_of(&root["env"]).map_err(|what| shape("env", what))?,
            default_shell: root["defaults"]["run"]["shell"].as_str().map(str::to_string),
            jobs,
        })
    }

    /// The job called `id`.
    pub fn job(&self, id: &str) -> Option<&Job> {
        self.jobs.iter().find(|j| j.id == id)
    }
}

type ShapeError = (String, String);

fn read_job(id: &str, value: &Value) -> Result<Job, ShapeError> {
    let needs = match &value["needs"] {
        Value::Null => Vec::new(),
        Value::Sequence(items) => items.iter().filter_map(scalar).collect(),
        other => vec![scalar(other).ok_or_else(|| (".needs".to_string(), "not text or a list".into()))?],
    };
    let steps = value["steps"]
        .as_sequence()
        .ok_or_else(|| (".steps".to_string(), "missing or not a list".to_string()))?
        .iter()
        .enumerate()
        .map(|(i, step)| read_step(step).map_err(|what| (format!(".steps[{i}]"), what)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Job {
        id: id.to_string(),
        name: value["name"].as_str().map(str::to_string),
        needs,
        env: map_of(&value["env"]).map_err(|what| (".env".to_string(), what))?,
        timeout_minutes: value["timeout-minutes"].as_u64(),
        matrix: read_matrix(&value["strategy"]["matrix"])
            .map_err(|what| (".strategy.matrix".to_string(), what))?,
        steps,
    })
}

fn read_step(value: &Value) -> Result<Step, String> {
    let action = match (value["run"].as_str(), value["uses"].as_str()) {
        (Some(script), None) => StepAction::Run {
            script: script.to_string(),
            shell: value["shell"].as_str().map(str::to_string),
        },
        (None, Some(action)) => StepAction::Uses {
            action: action.to_string(),
            with: map_of(&value["with"])?,
        },
        _ => return Err("a step needs exactly one of `run` and `uses`".into()),
    };
    Ok(Step {
        name: value["name"].as_str().map(str::to_string),
        condition: value["if"]
            .as_str()
            .map(str::to_string)
            .or_else(|| scalar(&value["if"])),
        env: map_of(&value["env"])?,
        action,
    })
}

/// A matrix's combinations: its axes' product, then its `include` entries.
fn read_matrix(value: &Value) -> Result<Vec<Env>, String> {
    let Some(mapping) = value.as_mapping() else {
        return match value {
            Value::Null => Ok(Vec::new()),
            _ => Err("not a mapping".into()),
        };
    };
    let mut combos: Vec<Env> = vec![Env::new()];
    let mut includes = Vec::new();
    for (axis, values) in mapping {
        let axis = scalar(axis).ok_or("an axis name that is not text")?;
        match axis.as_str() {
            "include" => {
                for entry in values.as_sequence().ok_or("`include` is not a list")? {
                    includes.push(map_of(entry)?);
                }
            }
            "exclude" => return Err("`exclude` is not supported by the rehearsal".into()),
            _ => {
                let values: Vec<String> = values
                    .as_sequence()
                    .ok_or_else(|| format!("axis `{axis}` is not a list"))?
                    .iter()
                    .filter_map(scalar)
                    .collect();
                let mut next = Vec::new();
                for combo in &combos {
                    for value in &values {
                        let mut with = combo.clone();
                        with.insert(axis.clone(), value.clone());
                        next.push(with);
                    }
                }
                combos = next;
            }
        }
    }
    if combos.len() == 1 && combos[0].is_empty() {
        combos.clear();
    }
    combos.extend(includes);
    Ok(combos)
}

/// A mapping of scalars as text (`Null` is empty).
fn map_of(value: &Value) -> Result<Env, String> {
    match value {
        Value::Null => Ok(Env::new()),
        Value::Mapping(mapping) => mapping
            .iter()
            .map(|(k, v)| match (scalar(k), scalar(v)) {
                (Some(k), Some(v)) => Ok((k, v)),
                _ => Err(format!("{k:?}: {v:?} is not a name and a text value")),
            })
            .collect(),
        other => Err(format!("{other:?} is not a mapping")),
    }
}

/// A scalar as text: strings, numbers and booleans.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Workflow, WorkflowError> {
        Workflow::parse(Path::new("ci.yml"), text)
    }

    #[test]
    fn jobs_needs_matrix_and_steps_are_read() {
        let workflow = parse(
            "name: ci\ndefaults: {run: {shell: bash}}\njobs:\n  a:\n    steps:\n      - run: echo a\n  b:\n    needs: a\n    timeout-minutes: 5\n    strategy:\n      matrix:\n        os: [x, y]\n        include:\n          - os: z\n            extra: 1\n    steps:\n      - uses: actions/cache@v4\n        with: {key: k, path: p}\n      - name: last\n        if: always()\n        run: echo b\n",
        )
        .unwrap();
        assert_eq!(workflow.default_shell.as_deref(), Some("bash"));
        let b = workflow.job("b").unwrap();
        assert_eq!(b.needs, ["a"]);
        assert_eq!(b.timeout_minutes, Some(5));
        let oses: Vec<&str> = b.matrix.iter().map(|m| m["os"].as_str()).collect();
        assert_eq!(oses, ["x", "y", "z"]);
        assert_eq!(b.matrix[2]["extra"], "1");
        assert_eq!(b.steps[1].condition.as_deref(), Some("always()"));
        assert!(
            matches!(&b.steps[0].action, StepAction::Uses { action, with } if action == "actions/cache@v4" && with["key"] == "k")
        );
        assert!(workflow.job("a").unwrap().matrix.is_empty());
    }

    #[test]
    fn a_need_that_names_no_job_is_refused_where_it_is() {
        let err = parse("jobs:\n  a:\n    needs: [nope]\n    steps: [{run: x}]\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("jobs.a.needs") && err.contains("no job `nope`"),
            "{err}"
        );
    }

    #[test]
    fn a_step_with_both_run_and_uses_is_refused_where_it_is() {
        let err = parse("jobs:\n  a:\n    steps:\n      - run: x\n      - {run: y, uses: z}\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("jobs.a.steps[1]") && err.contains("exactly one"),
            "{err}"
        );
    }

    #[test]
    fn a_matrix_exclude_is_refused() {
        let err = parse(
            "jobs:\n  a:\n    strategy: {matrix: {os: [x], exclude: [{os: x}]}}\n    steps: [{run: x}]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("`exclude` is not supported"), "{err}");
    }
}
