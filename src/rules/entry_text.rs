//! Entries written as text, `key=value[,key=value]`, as `sluice explain` and `/ui` take them.

/// The entries of `text`, split at `,` (a value may hold `=` but not `,`), each key trimmed;
/// an entry without `=`, or with an empty key, is an error that quotes it.
pub fn split_entries(text: &str) -> impl Iterator<Item = Result<(&str, &str), String>> {
    text.split(',').map(|entry| {
        let (key, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("'{entry}' is not key=value"))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("'{entry}' has an empty key"));
        }
        Ok((key, value))
    })
}
