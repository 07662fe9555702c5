//! A bucket id written as text, `key=value[,key=value]` in any order, for `sluice explain
//! --bucket` and `/ui`.

use std::collections::BTreeMap;

use super::check_bucket;
use crate::rules::split_entries;

/// Parses `key=value[,key=value]` into a bucket id (a value may hold `=` but not `,`; keys are
/// trimmed). A key given twice, an empty key, or a bucket over the caps of [`check_bucket`] is
/// an error that says so.
pub fn parse_bucket(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut bucket = BTreeMap::new();
    for entry in split_entries(text) {
        let (key, value) = entry?;
        if bucket.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(format!(
                "the key '{key}' is given twice (a bucket id is a map)"
            ));
        }
    }
    check_bucket(&bucket).map_err(|e| e.to_string())?;
    Ok(bucket)
}
