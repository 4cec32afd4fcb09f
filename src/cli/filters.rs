//! `--exclude`, `--include` and `--exclude-from` in the order given on the
//! command line: clap keeps each option's values apart, and their indices
//! put them back in order (the first matching rule decides).

use clap::ArgMatches;

use crate::session::plan::filter::{Filter, Verdict};

use super::Failure;

enum Given {
    Rule(Verdict, String),
    File(std::path::PathBuf),
}

/// The filter of a `send` or `pull` command line.
pub(crate) fn of(m: Option<&ArgMatches>) -> Result<Filter, Failure> {
    let Some(m) = m else {
        return Ok(Filter::default());
    };
    let mut given: Vec<(usize, Given)> = Vec::new();
    for (id, verdict) in [("exclude", Verdict::Exclude), ("include", Verdict::Include)] {
        given.extend(indexed::<String>(m, id).map(|(i, p)| (i, Given::Rule(verdict, p))));
    }
    given
        .extend(indexed::<std::path::PathBuf>(m, "exclude_from").map(|(i, f)| (i, Given::File(f))));
    given.sort_by_key(|(i, _)| *i);
    let mut filter = Filter::default();
    for (_, g) in given {
        let added = match g {
            Given::Rule(v, p) => filter.push(v, &p).map_err(|e| e.to_string()),
            Given::File(f) => std::fs::read_to_string(&f)
                .map_err(|e| e.to_string())
                .and_then(|text| filter.push_file(&text).map_err(|e| e.to_string()))
                .map_err(|e| format!("--exclude-from {}: {e}", f.display())),
        };
        added.map_err(|e| Failure::Usage(anyhow::anyhow!(e)))?;
    }
    Ok(filter)
}

/// The values of option `id` with their positions on the command line.
fn indexed<T: Clone + Send + Sync + 'static>(
    m: &ArgMatches,
    id: &str,
) -> impl Iterator<Item = (usize, T)> {
    let values: Vec<T> = m
        .get_many::<T>(id)
        .map(|v| v.cloned().collect())
        .unwrap_or_default();
    let indices: Vec<usize> = m.indices_of(id).map(Iterator::collect).unwrap_or_default();
    indices.into_iter().zip(values)
}
