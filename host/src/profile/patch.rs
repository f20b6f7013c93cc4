//! Patch layers (`cordis.patch.yml`) and how they compose into the row list.
//!
//! The semantics are those of DeepSeek Harness's loader, in one pass over all layers flattened in
//! order:
//! - `{insert: [rows]}` appends rows to the root list, `{insert: [rows], id: G}` to group row
//!   `G`'s list; inserted rows are indexed at once, so later entries can target them;
//! - `{id, name?, …keys}` overrides row `id`: `name` is a guard (a mismatch skips the entry; it
//!   never renames), every other key is assigned shallowly (`config` is replaced, not merged);
//! - an entry that matches nothing is skipped with a warning, and composition continues.
//!
//! One dsh extension, which the reference does not know: `before: ROW` or `after: ROW` on an
//! entry places top-level rows — the rows an `insert` adds, or the row an override names — just
//! before or after another top-level row. A target that does not exist is a warning: inserted
//! rows stay appended, an overridden row keeps its place. Layers without these keys compose
//! exactly as the reference composes them.
//!
//! Like the reference, the index holds rows as they were when indexed: replacing a group's
//! `config` detaches its old children (later overrides of their ids change nothing) and the new
//! children are not indexed.

use std::collections::HashMap;
use std::path::Path;

use dsh_abi::js;
use serde_json::{Map, Value};

use super::yaml;
use dsh_session::meta::PatchCopy;

/// One patch layer: a label (bundle name or file) and its entries, all mappings.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    pub label: String,
    pub entries: Vec<Map<String, Value>>,
}

/// What a layer is called in errors, as DeepSeek Harness calls it: the home-wide user layer is
/// a list of `patches`, every other layer an `overlay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    Overlay,
    Patches,
}

impl LayerKind {
    fn noun(self) -> &'static str {
        match self {
            LayerKind::Overlay => "overlay",
            LayerKind::Patches => "patches",
        }
    }
}

pub use dsh_session::fsutil::MAX_LAYER_BYTES;

/// What a session keeps of the `--patch` layer at `path`: the file as read — or, when it holds
/// credentials written inline, the same layer written as JSON (which is YAML too) with each of
/// them `[redacted]`, so no copy (in the home, or in a shared database) holds one in clear.
pub fn session_copy(path: &Path) -> std::io::Result<PatchCopy> {
    let bytes = dsh_session::fsutil::read_limited(path, MAX_LAYER_BYTES, "a layer")?;
    let verbatim = PatchCopy::verbatim(path, bytes);
    let Some(layer) = std::str::from_utf8(&verbatim.bytes).ok().and_then(|text| Layer::parse("", "", text).ok()) else {
        return Ok(verbatim);
    };
    let mut redacted = Vec::new();
    let mut entries = Vec::with_capacity(layer.entries.len());
    for (index, entry) in layer.entries.into_iter().enumerate() {
        let name = match entry.get("id").and_then(Value::as_str) {
            Some(id) => id.to_owned(),
            None => format!("entry {}", index + 1),
        };
        let mut entry = Value::Object(entry);
        let taken = dsh_session::redact::take_inline_credentials(&mut entry);
        redacted.extend(taken.into_iter().map(|found| format!("{name} {}", found.path)));
        entries.push(entry);
    }
    if redacted.is_empty() {
        return Ok(verbatim);
    }
    let text = format!("{}\n", dsh_abi::js::to_string_pretty(&entries));
    Ok(PatchCopy { bytes: text.into_bytes(), redacted, ..verbatim })
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayerError {
    #[error("failed to read {noun} {file}: {reason}")]
    Read { noun: &'static str, file: String, reason: String },
    #[error("failed to parse {noun} {file}: {reason}")]
    Parse { noun: &'static str, file: String, reason: String },
    #[error("{noun} {file} must be a top-level YAML array of loader patch entries (`[]` is the empty layer)")]
    NotAnArray { noun: &'static str, file: String },
    #[error("{noun} entry {index} in {file} must be a mapping (a loader patch entry)")]
    NotAMapping { noun: &'static str, file: String, index: usize },
    #[error("{noun} entry {index} in {file}: `insert` must be a list of rows (mappings)")]
    BadInsert { noun: &'static str, file: String, index: usize },
}

impl Layer {
    /// Parses an overlay's text; `file` names it in errors.
    pub fn parse(label: &str, file: &str, text: &str) -> Result<Layer, LayerError> {
        Layer::parse_as(LayerKind::Overlay, label, file, text)
    }

    /// Parses a layer's text, named in errors as a `kind`.
    pub fn parse_as(kind: LayerKind, label: &str, file: &str, text: &str) -> Result<Layer, LayerError> {
        let noun = kind.noun();
        let value = yaml::parse(text).map_err(|err| LayerError::Parse {
            noun,
            file: file.to_owned(),
            reason: err.to_string(),
        })?;
        let Some(Value::Array(items)) = value else {
            return Err(LayerError::NotAnArray { noun, file: file.to_owned() });
        };
        let mut entries = Vec::with_capacity(items.len());
        for (position, item) in items.into_iter().enumerate() {
            let index = position + 1;
            let Value::Object(entry) = item else {
                return Err(LayerError::NotAMapping { noun, file: file.to_owned(), index });
            };
            if let Some(insert) = entry.get("insert").filter(|insert| truthy(insert)) {
                let rows_ok = insert.as_array().is_some_and(|rows| rows.iter().all(Value::is_object));
                if !rows_ok {
                    return Err(LayerError::BadInsert { noun, file: file.to_owned(), index });
                }
            }
            entries.push(entry);
        }
        Ok(Layer { label: label.to_owned(), entries })
    }

    /// Reads and parses a layer file of at most [`MAX_LAYER_BYTES`]; a missing file is an error
    /// (the caller named it).
    pub fn read(kind: LayerKind, label: &str, path: &Path, file: &str) -> Result<Layer, LayerError> {
        let failed = |reason: String| LayerError::Read { noun: kind.noun(), file: file.to_owned(), reason };
        let text = dsh_session::fsutil::read_text_limited(path, MAX_LAYER_BYTES, "a layer")
            .map_err(|err| failed(err.to_string()))?;
        Layer::parse_as(kind, label, file, &text)
    }
}

/// A skipped patch entry: the layer, the entry's place in it (from 1), the reference's message,
/// and where to look instead when dsh knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub layer: String,
    pub entry: usize,
    pub message: String,
    pub hint: Option<String>,
}

impl Warning {
    /// `[<layer>] <message>`, as DeepSeek Harness prints it.
    pub fn reference_text(&self) -> String {
        format!("[{}] {}", self.layer, self.message)
    }
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {} (patch entry {})", self.layer, self.message, self.entry)?;
        match &self.hint {
            Some(hint) => write!(f, "; {hint}"),
            None => Ok(()),
        }
    }
}

/// Where a top-level row came from: the layer that inserted it and the layers that changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    pub origin: String,
    pub patched_by: Vec<String>,
}

impl Provenance {
    /// `origin[, patched by a, b]`, as `dump --origins` prints it.
    pub fn label(&self) -> String {
        if self.patched_by.is_empty() {
            self.origin.clone()
        } else {
            format!("{}, patched by {}", self.origin, self.patched_by.join(", "))
        }
    }
}

/// The composed row list.
#[derive(Debug, Clone, PartialEq)]
pub struct Composition {
    /// Top-level rows, in order.
    pub rows: Vec<Value>,
    /// Aligned with `rows`.
    pub provenance: Vec<Provenance>,
    /// Skipped entries.
    pub warnings: Vec<Warning>,
    /// Keys that are no row or entry key (`disable: true`): composed as the reference composes
    /// them (stored on the row, where nothing reads them), and named by `dsh config check`.
    pub unknown_keys: Vec<Warning>,
    /// For each row id: the layer that last set its `config` (else the one that inserted it).
    config_layers: HashMap<String, String>,
    /// For a row id and config key set after every layer ([`Composition::set_enabled_config`]):
    /// what set it.
    key_layers: HashMap<(String, String), String>,
}

impl Composition {
    /// The layer a user should edit to change row `id`'s config.
    pub fn config_layer(&self, id: &str) -> Option<&str> {
        self.config_layers.get(id).map(String::as_str)
    }

    /// What to edit to change `key` of row `id`'s config: what set the key after every layer,
    /// else the row's config layer.
    pub fn key_layer(&self, id: &str, key: &str) -> Option<&str> {
        self.key_layers.get(&(id.to_owned(), key.to_owned())).map(String::as_str).or_else(|| self.config_layer(id))
    }

    /// Every enabled service row in load order: top-level rows in order, the rows of an enabled
    /// group in place of the group.
    pub fn enabled_rows(&self) -> Vec<&Map<String, Value>> {
        self.enabled_rows_with_origin().into_iter().map(|(row, _)| row).collect()
    }

    /// Every service row, enabled or not, with whether it is enabled (a row inside a disabled
    /// group is not).
    pub fn service_rows(&self) -> Vec<(&Map<String, Value>, bool)> {
        fn collect<'a>(rows: &'a [Value], parent_enabled: bool, out: &mut Vec<(&'a Map<String, Value>, bool)>) {
            for row in rows {
                let Value::Object(fields) = row else { continue };
                let enabled = parent_enabled && !fields.get("disabled").is_some_and(truthy);
                match (fields.get("group").is_some_and(truthy), fields.get("config")) {
                    (true, Some(Value::Array(children))) => collect(children, enabled, out),
                    (true, _) => {}
                    (false, _) => out.push((fields, enabled)),
                }
            }
        }
        let mut rows = Vec::new();
        collect(&self.rows, true, &mut rows);
        rows
    }

    /// The ids of the enabled rows of package `name`, in row order.
    pub fn enabled_ids_of(&self, name: &str) -> Vec<String> {
        let of_name = |row: &&Map<String, Value>| row.get("name").and_then(Value::as_str) == Some(name);
        let id = |row: &Map<String, Value>| row.get("id").and_then(Value::as_str).map(str::to_owned);
        self.enabled_rows().into_iter().filter(of_name).filter_map(id).collect()
    }

    /// Sets `key` to `value` in the config of every enabled row of package `name` (a row without
    /// a config gets one); `source` is what set it, for messages about that key; the ids of the
    /// rows changed.
    pub fn set_enabled_config(&mut self, name: &str, key: &str, value: &Value, source: &str) -> Vec<String> {
        fn set(rows: &mut [Value], name: &str, key: &str, value: &Value, changed: &mut Vec<String>) {
            for row in rows {
                let Value::Object(fields) = row else { continue };
                if fields.get("disabled").is_some_and(truthy) {
                    continue;
                }
                if fields.get("group").is_some_and(truthy) {
                    if let Some(Value::Array(children)) = fields.get_mut("config") {
                        set(children, name, key, value, changed);
                    }
                    continue;
                }
                if fields.get("name").and_then(Value::as_str) != Some(name) {
                    continue;
                }
                let config = fields.entry("config").or_insert_with(|| Value::Object(Map::new()));
                if config.is_null() {
                    *config = Value::Object(Map::new());
                }
                if let Value::Object(config) = config {
                    config.insert(key.to_owned(), value.clone());
                    changed.extend(fields.get("id").and_then(Value::as_str).map(str::to_owned));
                }
            }
        }
        let mut changed = Vec::new();
        set(&mut self.rows, name, key, value, &mut changed);
        for id in &changed {
            self.key_layers.insert((id.clone(), key.to_owned()), source.to_owned());
        }
        changed
    }

    /// [`Composition::enabled_rows`], each with the layer that inserted it (for a row inside a
    /// group, the group's).
    pub fn enabled_rows_with_origin(&self) -> Vec<(&Map<String, Value>, &str)> {
        let mut enabled = Vec::new();
        for (row, provenance) in self.rows.iter().zip(&self.provenance) {
            collect_enabled(std::slice::from_ref(row), &provenance.origin, &mut enabled);
        }
        enabled
    }
}

fn collect_enabled<'a>(rows: &'a [Value], origin: &'a str, enabled: &mut Vec<(&'a Map<String, Value>, &'a str)>) {
    for row in rows {
        let Value::Object(fields) = row else { continue };
        if fields.get("disabled").is_some_and(truthy) {
            continue;
        }
        match (fields.get("group").is_some_and(truthy), fields.get("config")) {
            (true, Some(Value::Array(children))) => collect_enabled(children, origin, enabled),
            (true, _) => {}
            (false, _) => enabled.push((fields, origin)),
        }
    }
}

/// The keys a row has.
const ROW_KEYS: [&str; 5] = ["id", "name", "config", "disabled", "group"];
/// The keys an override entry has: a row's, and the placement keys.
const OVERRIDE_KEYS: [&str; 7] = ["id", "name", "config", "disabled", "group", "before", "after"];

/// JavaScript truthiness, which the reference uses for `insert`, `id`, `name`, `group` and
/// `disabled`.
pub fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(flag) => *flag,
        Value::Number(number) => number.as_f64().is_some_and(|n| n != 0.0 && !n.is_nan()),
        Value::String(text) => !text.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// `JSON.stringify`, as the reference quotes ids and names in warnings (`undefined` when absent).
fn quoted(value: Option<&Value>) -> String {
    value.map_or_else(|| "undefined".to_owned(), js::to_string)
}

enum Slot {
    Attached(Vec<usize>),
    Detached(Value),
}

struct Composer {
    rows: Vec<Value>,
    /// Aligned with `rows`: a number per top-level row that survives moves.
    serials: Vec<u64>,
    /// Aligned with `rows`.
    provenance: Vec<Provenance>,
    next_serial: u64,
    /// The rows a placement moved in the layer being applied.
    moved: std::collections::HashSet<u64>,
    index: HashMap<String, Slot>,
    warnings: Vec<Warning>,
    unknown_keys: Vec<Warning>,
    config_layers: HashMap<String, String>,
    /// The entry being applied: (layer, its place from 1).
    at: (String, usize),
}

/// Composes `layers` over `base` (the profile's `cordis.yml`, labelled `base_label`).
pub fn compose(base: Vec<Value>, base_label: &str, layers: &[Layer]) -> Composition {
    let mut composer = Composer {
        rows: Vec::new(),
        serials: Vec::new(),
        provenance: Vec::new(),
        next_serial: 0,
        moved: Default::default(),
        index: HashMap::new(),
        warnings: Vec::new(),
        unknown_keys: Vec::new(),
        config_layers: HashMap::new(),
        at: (String::new(), 0),
    };
    composer.append_rows(&base, base_label);
    for layer in layers {
        let before: HashMap<u64, Value> = composer.serials.iter().copied().zip(composer.rows.iter().cloned()).collect();
        composer.moved.clear();
        for (position, entry) in layer.entries.iter().enumerate() {
            composer.at = (layer.label.clone(), position + 1);
            composer.apply(entry, &layer.label);
        }
        for (position, (serial, row)) in composer.serials.iter().zip(&composer.rows).enumerate() {
            if let Some(was) = before.get(serial) {
                if was != row || composer.moved.contains(serial) {
                    composer.provenance[position].patched_by.push(layer.label.clone());
                }
            }
        }
    }
    Composition {
        rows: composer.rows,
        provenance: composer.provenance,
        warnings: composer.warnings,
        unknown_keys: composer.unknown_keys,
        config_layers: composer.config_layers,
        key_layers: HashMap::new(),
    }
}

/// Where an entry asks its rows to go (the dsh extension).
enum Placement {
    Before(String),
    After(String),
}

impl Placement {
    fn target(&self) -> &str {
        match self {
            Placement::Before(target) | Placement::After(target) => target,
        }
    }

    fn key(&self) -> &'static str {
        match self {
            Placement::Before(_) => "before",
            Placement::After(_) => "after",
        }
    }
}

fn id_key(id: &Value) -> String {
    js::to_string(id)
}

impl Composer {
    fn warn(&mut self, layer: &str, message: String) {
        self.warn_with_hint(layer, message, None);
    }

    fn warn_with_hint(&mut self, layer: &str, message: String, hint: Option<String>) {
        debug_assert_eq!(layer, self.at.0);
        self.warnings.push(Warning { layer: layer.to_owned(), entry: self.at.1, message, hint });
    }

    /// Indexes `rows` (which sit at `parent` + `first` + their position) and the children of
    /// their groups.
    fn index_rows_from(&mut self, rows: &[Value], parent: &[usize], first: usize, layer: &str) {
        for (offset, row) in rows.iter().enumerate() {
            let Value::Object(fields) = row else { continue };
            let mut path = parent.to_vec();
            path.push(first + offset);
            if let Some(id) = fields.get("id").filter(|id| truthy(id)) {
                self.index.insert(id_key(id), Slot::Attached(path.clone()));
                if let Value::String(id) = id {
                    self.config_layers.insert(id.clone(), layer.to_owned());
                }
            }
            if let (Some(group), Some(Value::Array(children))) = (fields.get("group"), fields.get("config")) {
                if truthy(group) {
                    self.index_rows_from(children, &path, 0, layer);
                }
            }
        }
    }

    /// Detached rows stay indexed (as the reference's object references do) but are no longer
    /// part of the list; rows inserted into them are detached too.
    fn index_detached(&mut self, rows: &[Value]) {
        for row in rows {
            let Value::Object(fields) = row else { continue };
            if let Some(id) = fields.get("id").filter(|id| truthy(id)) {
                self.index.insert(id_key(id), Slot::Detached(row.clone()));
            }
            if let (Some(group), Some(Value::Array(children))) = (fields.get("group"), fields.get("config")) {
                if truthy(group) {
                    self.index_detached(children);
                }
            }
        }
    }

    fn row_mut(&mut self, path: &[usize]) -> Option<&mut Map<String, Value>> {
        let (first, rest) = path.split_first()?;
        let mut row = self.rows.get_mut(*first)?.as_object_mut()?;
        for position in rest {
            row = row.get_mut("config")?.as_array_mut()?.get_mut(*position)?.as_object_mut()?;
        }
        Some(row)
    }

    /// Moves every index entry below `path` out of the list (their rows are being replaced).
    fn detach_below(&mut self, path: &[usize]) {
        let below: Vec<String> = self
            .index
            .iter()
            .filter_map(|(id, slot)| match slot {
                Slot::Attached(child) if child.len() > path.len() && child.starts_with(path) => Some(id.clone()),
                _ => None,
            })
            .collect();
        for id in below {
            if let Some(Slot::Attached(child)) = self.index.get(&id) {
                let row = self.row_mut(&child.clone()).map(|row| Value::Object(row.clone())).unwrap_or_default();
                self.index.insert(id, Slot::Detached(row));
            }
        }
    }

    /// The entry's `before`/`after`, when it has a usable one (a problem is a warning).
    fn placement(&mut self, entry: &Map<String, Value>, layer: &str) -> Option<Placement> {
        let read =
            |key: &str| entry.get(key).map(|value| value.as_str().filter(|id| !id.is_empty()).map(str::to_owned));
        match (read("before"), read("after")) {
            (None, None) => None,
            (Some(_), Some(_)) => {
                self.warn(layer, "patch: an entry takes before or after, not both; placement ignored".to_owned());
                None
            }
            (Some(Some(target)), None) => Some(Placement::Before(target)),
            (None, Some(Some(target))) => Some(Placement::After(target)),
            (Some(None), None) | (None, Some(None)) => {
                let key = if entry.contains_key("before") { "before" } else { "after" };
                self.warn(layer, format!("patch: {key} must be a row id (a non-empty string); placement ignored"));
                None
            }
        }
    }

    /// Notes the keys of `fields` that are none of `known`.
    fn note_unknown_keys(&mut self, layer: &str, fields: &Map<String, Value>, known: &[&str], what: &str) {
        for key in fields.keys().filter(|key| !known.contains(&key.as_str())) {
            let guess = known
                .iter()
                .find(|known| crate::is_typo_of(key, known))
                .map(|known| format!(" (did you mean \"{known}\"?)"));
            self.unknown_keys.push(Warning {
                layer: layer.to_owned(),
                entry: self.at.1,
                message: format!(
                    "{what} key \"{key}\" is not one dsh reads{}; it is kept on the row and does nothing",
                    guess.unwrap_or_default()
                ),
                hint: None,
            });
        }
    }

    fn apply(&mut self, entry: &Map<String, Value>, layer: &str) {
        self.note_entry_keys(entry, layer);
        let id = entry.get("id").filter(|id| truthy(id));
        let placement = self.placement(entry, layer);
        if let Some(insert) = entry.get("insert").filter(|insert| truthy(insert)) {
            let rows = insert.as_array().cloned().unwrap_or_default();
            return self.apply_insert(id, rows, placement, layer);
        }
        let Some(id) = id else {
            self.warn(layer, "patch: id is required for non-insert patches".to_owned());
            return;
        };
        if self.override_row(entry, id, layer) {
            if let Some(placement) = placement {
                self.move_row(id, &placement, layer);
            }
        }
    }

    /// Notes the keys an entry, and the rows it inserts, have that dsh does not read.
    fn note_entry_keys(&mut self, entry: &Map<String, Value>, layer: &str) {
        match entry.get("insert").and_then(Value::as_array) {
            Some(rows) => {
                self.note_unknown_keys(layer, entry, &["insert", "id", "before", "after"], "insert entry");
                for row in rows.iter().filter_map(Value::as_object) {
                    self.note_unknown_keys(layer, row, &ROW_KEYS, "row");
                }
            }
            None => self.note_unknown_keys(layer, entry, &OVERRIDE_KEYS, "patch entry"),
        }
    }

    /// Inserts `rows` at the end of group `id` (or of the top level), or where `placement` says.
    fn apply_insert(&mut self, id: Option<&Value>, rows: Vec<Value>, placement: Option<Placement>, layer: &str) {
        match (id, placement) {
            (Some(group), Some(placement)) => {
                self.warn(
                    layer,
                    format!(
                        "patch insert: {} places top-level rows only; the rows go to the end of group {}",
                        placement.key(),
                        quoted(Some(group))
                    ),
                );
                self.insert(id, rows, layer);
            }
            (None, Some(placement)) => {
                let first = self.rows.len();
                self.insert(None, rows, layer);
                let inserted: Vec<usize> = (first..self.rows.len()).collect();
                self.place(&inserted, &placement, layer, "the rows stay appended");
            }
            (_, None) => self.insert(id, rows, layer),
        }
    }

    /// Sets the entry's fields on row `id`; false (with a warning) when there is no such row or
    /// the entry's `name` guard names another package.
    fn override_row(&mut self, entry: &Map<String, Value>, id: &Value, layer: &str) -> bool {
        let key = id_key(id);
        let target_name = match self.index.get(&key) {
            None => {
                let former = id.as_str().and_then(crate::migration::former_row);
                self.warn_with_hint(layer, format!("patch: entry {} not found", quoted(Some(id))), former);
                return false;
            }
            Some(Slot::Attached(path)) => {
                let path = path.clone();
                self.row_mut(&path).and_then(|row| row.get("name").cloned())
            }
            Some(Slot::Detached(row)) => row.get("name").cloned(),
        };
        if let Some(name) = entry.get("name").filter(|name| truthy(name)) {
            if target_name.as_ref() != Some(name) && !self.renamed_package(id, name, target_name.as_ref(), layer) {
                let message = format!(
                    "patch: name mismatch for {} (expected {}, got {}), skipping",
                    quoted(Some(id)),
                    quoted(target_name.as_ref()),
                    quoted(Some(name))
                );
                self.warn(layer, message);
                return false;
            }
        }
        let overrides: Vec<(&String, &Value)> = entry
            .iter()
            .filter(|(key, _)| !matches!(key.as_str(), "id" | "insert" | "name" | "before" | "after"))
            .collect();
        match self.index.get_mut(&key) {
            Some(Slot::Detached(Value::Object(row))) => {
                for (name, value) in overrides {
                    row.insert(name.clone(), value.clone());
                }
            }
            Some(Slot::Attached(path)) => {
                let path = path.clone();
                if overrides.iter().any(|(name, _)| *name == "config") {
                    if self.row_mut(&path).is_some_and(|row| row.get("group").is_some_and(truthy)) {
                        self.detach_below(&path);
                    }
                    if let Value::String(id) = id {
                        self.config_layers.insert(id.clone(), layer.to_owned());
                    }
                }
                if let Some(row) = self.row_mut(&path) {
                    for (name, value) in overrides {
                        row.insert(name.clone(), value.clone());
                    }
                }
            }
            _ => {}
        }
        true
    }

    /// Whether a guard naming DeepSeek Harness's package (`@deepseek-ai/dsh-llm-retry`) meets the
    /// dsh row that does its job (`llm-retry`): the entry applies, and a warning says so, rather
    /// than its settings being skipped without a word.
    fn renamed_package(&mut self, id: &Value, name: &Value, target: Option<&Value>, layer: &str) -> bool {
        let bundled = name.as_str().and_then(crate::migration::replacement).map(|replacement| replacement.bundled);
        if bundled.is_none() || bundled != target.and_then(Value::as_str) {
            return false;
        }
        let message = format!(
            "patch: name {} for {} is DeepSeek Harness's package; in dsh the row is package {}, so the entry applies to it",
            quoted(Some(name)),
            quoted(Some(id)),
            quoted(target)
        );
        self.warn(layer, message);
        true
    }

    /// Moves the top-level row `id` where `placement` says.
    fn move_row(&mut self, id: &Value, placement: &Placement, layer: &str) {
        let keeps = format!("row {} keeps its place", quoted(Some(id)));
        match self.index.get(&id_key(id)) {
            Some(Slot::Attached(path)) if path.len() == 1 => {
                let moved = [path[0]];
                self.place(&moved, placement, layer, &keeps);
            }
            _ => self.warn(layer, format!("patch: {} places top-level rows only; {keeps}", placement.key())),
        }
    }

    /// Appends top-level rows (from `layer`), indexing them.
    fn append_rows(&mut self, rows: &[Value], layer: &str) {
        let first = self.rows.len();
        self.rows.extend(rows.iter().cloned());
        for _ in rows {
            self.serials.push(self.next_serial);
            self.next_serial += 1;
            self.provenance.push(Provenance { origin: layer.to_owned(), patched_by: Vec::new() });
        }
        self.index_rows_from(rows, &[], first, layer);
    }

    /// Moves the top-level rows at `moved` (ascending) just before or after the placement's
    /// target, keeping their order; warns (saying `otherwise`) when the target is not a
    /// top-level row.
    fn place(&mut self, moved: &[usize], placement: &Placement, layer: &str, otherwise: &str) {
        let target = js::to_string(placement.target());
        let anchor = match self.index.get(&target) {
            Some(Slot::Attached(path)) if path.len() == 1 => path[0],
            Some(_) => {
                self.warn(
                    layer,
                    format!(
                        "patch: {} {} is not a top-level row; {otherwise}",
                        placement.key(),
                        quoted(Some(&Value::from(placement.target())))
                    ),
                );
                return;
            }
            None => {
                self.warn(
                    layer,
                    format!(
                        "patch: {} {} not found; {otherwise}",
                        placement.key(),
                        quoted(Some(&Value::from(placement.target())))
                    ),
                );
                return;
            }
        };
        if moved.contains(&anchor) {
            return;
        }
        let anchor_serial = self.serials[anchor];
        let old_serials = self.serials.clone();
        let mut taken = Vec::with_capacity(moved.len());
        for position in moved.iter().rev() {
            taken.push((
                self.rows.remove(*position),
                self.serials.remove(*position),
                self.provenance.remove(*position),
            ));
        }
        taken.reverse();
        let anchor_now = self.serials.iter().position(|serial| *serial == anchor_serial).expect("the anchor stays");
        let at = match placement {
            Placement::Before(_) => anchor_now,
            Placement::After(_) => anchor_now + 1,
        };
        for (offset, (row, serial, provenance)) in taken.into_iter().enumerate() {
            self.moved.insert(serial);
            self.rows.insert(at + offset, row);
            self.serials.insert(at + offset, serial);
            self.provenance.insert(at + offset, provenance);
        }
        self.reindex_top_level(&old_serials);
    }

    /// Points every attached index entry at its row's new top-level position after a move;
    /// `old_serials` are the serials in their order before it.
    fn reindex_top_level(&mut self, old_serials: &[u64]) {
        let position_of: HashMap<u64, usize> =
            self.serials.iter().enumerate().map(|(position, serial)| (*serial, position)).collect();
        for slot in self.index.values_mut() {
            if let Slot::Attached(path) = slot {
                path[0] = position_of[&old_serials[path[0]]];
            }
        }
    }

    fn insert(&mut self, group: Option<&Value>, rows: Vec<Value>, layer: &str) {
        let Some(group) = group else {
            self.append_rows(&rows, layer);
            return;
        };
        let key = id_key(group);
        let path = match self.index.get_mut(&key) {
            None => {
                self.warn(layer, format!("patch insert: entry {} not found", quoted(Some(group))));
                return;
            }
            Some(Slot::Detached(Value::Object(target))) => {
                if target.get("group").is_some_and(truthy) {
                    push_children(target, &rows);
                    self.index_detached(&rows);
                } else {
                    self.warn(layer, format!("patch insert: entry {} is not a group", quoted(Some(group))));
                }
                return;
            }
            Some(Slot::Detached(_)) => return,
            Some(Slot::Attached(path)) => path.clone(),
        };
        let Some(target) = self.row_mut(&path) else { return };
        if !target.get("group").is_some_and(truthy) {
            self.warn(layer, format!("patch insert: entry {} is not a group", quoted(Some(group))));
            return;
        }
        let first = push_children(target, &rows);
        self.index_rows_from(&rows, &path, first, layer);
    }
}

/// Appends rows to a group's list (made a list first if it is not one); returns where they start.
fn push_children(group: &mut Map<String, Value>, rows: &[Value]) -> usize {
    let children = group.entry("config").or_insert_with(|| Value::Array(Vec::new()));
    if !children.is_array() {
        *children = Value::Array(Vec::new());
    }
    let list = children.as_array_mut().expect("made a list above");
    let first = list.len();
    list.extend(rows.iter().cloned());
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn layer(label: &str, text: &str) -> Layer {
        Layer::parse(label, label, text).unwrap()
    }

    fn rows_of(layers: &[Layer]) -> (Vec<Value>, Vec<String>) {
        let composition = compose(Vec::new(), "cordis.yml", layers);
        (composition.rows, composition.warnings.iter().map(Warning::reference_text).collect())
    }

    #[test]
    fn later_layers_win_and_config_is_replaced_whole() {
        let (rows, warnings) = rows_of(&[
            layer("a", "[{insert: [{id: a, name: pkg-a}]}]"),
            layer("b", "[{id: a, config: {v: 2}}]"),
            layer("user", "[{id: a, config: {v: 3}}]"),
        ]);
        assert_eq!(rows, vec![json!({"id": "a", "name": "pkg-a", "config": {"v": 3}})]);
        assert!(warnings.is_empty());
    }

    #[test]
    fn an_override_of_a_missing_id_warns_and_changes_nothing() {
        let (rows, warnings) = rows_of(&[
            layer("one", "[{insert: [{id: x, name: pkg-x, config: {a: 1}}]}]"),
            layer("two", "[{id: x, config: {a: 2}}, {id: missing, config: {}}]"),
        ]);
        assert_eq!(rows, vec![json!({"id": "x", "name": "pkg-x", "config": {"a": 2}})]);
        assert_eq!(warnings, vec!["[two] patch: entry \"missing\" not found"]);
    }

    #[test]
    fn an_override_of_a_deepseek_harness_row_points_to_where_its_job_is_done() {
        let layers = [
            layer("base", "[{insert: [{id: agent, name: agent}]}]"),
            layer("user", "[{id: agent-default-model, config: {model: m}}]"),
        ];
        let composition = compose(Vec::new(), "cordis.yml", &layers);
        let warning = &composition.warnings[0];
        assert_eq!(warning.reference_text(), "[user] patch: entry \"agent-default-model\" not found");
        assert!(warning.to_string().ends_with("(patch entry 1); agent-default-model is a DeepSeek Harness row; in dsh the agent's route is the `agent` row's config.provider, and its model is the `model` of that provider's row (`llm-deepseek` in the base bundle)"), "{warning}");
    }

    #[test]
    fn config_is_not_merged() {
        let (rows, _) = rows_of(&[
            layer("one", "[{insert: [{id: x, name: p, config: {a: 1, b: 2}}]}]"),
            layer("two", "[{id: x, config: {b: 3}}]"),
        ]);
        assert_eq!(rows[0]["config"], json!({"b": 3}));
    }

    #[test]
    fn the_name_guard_skips_a_mismatched_override_and_never_renames() {
        let (rows, warnings) = rows_of(&[layer(
            "one",
            "[{insert: [{id: llm-retry, name: llm-retry}]}, {id: llm-retry, name: other, disabled: true}, {id: llm-retry, name: llm-retry, config: {}}]",
        )]);
        assert_eq!(rows, vec![json!({"id": "llm-retry", "name": "llm-retry", "config": {}})]);
        assert_eq!(
            warnings,
            vec!["[one] patch: name mismatch for \"llm-retry\" (expected \"llm-retry\", got \"other\"), skipping"]
        );
    }

    #[test]
    fn a_warning_names_its_layer_and_entry() {
        let composition = compose(
            Vec::new(),
            "cordis.yml",
            &[layer("user.yml", "[{insert: [{id: a, name: p}]}, {name: forgot-the-id}]")],
        );
        assert_eq!(
            composition.warnings[0].to_string(),
            "[user.yml] patch: id is required for non-insert patches (patch entry 2)"
        );
    }

    #[test]
    fn an_override_without_an_id_warns() {
        let (_, warnings) = rows_of(&[layer("one", "[{config: {}}]")]);
        assert_eq!(warnings, vec!["[one] patch: id is required for non-insert patches"]);
    }

    #[test]
    fn rows_inserted_earlier_in_the_same_file_are_targetable() {
        let (rows, warnings) = rows_of(&[layer("one", "[{insert: [{id: a, name: p}]}, {id: a, disabled: true}]")]);
        assert_eq!(rows, vec![json!({"id": "a", "name": "p", "disabled": true})]);
        assert!(warnings.is_empty());
    }

    #[test]
    fn disabled_false_brings_a_row_back() {
        let composition = compose(
            Vec::new(),
            "cordis.yml",
            &[
                layer("one", "[{insert: [{id: a, name: p}]}, {id: a, disabled: true}]"),
                layer("two", "[{id: a, disabled: false}]"),
            ],
        );
        assert_eq!(composition.enabled_rows().len(), 1);
    }

    #[test]
    fn inserts_go_into_groups_and_group_children_are_targetable() {
        let (rows, warnings) = rows_of(&[
            layer("one", "[{insert: [{id: g, name: group, group: true}]}, {insert: [{id: c, name: child}], id: g}]"),
            layer("two", "[{id: c, config: {x: 1}}, {insert: [{id: d, name: d}], id: c}, {insert: [{id: e, name: e}], id: nope}]"),
        ]);
        assert_eq!(
            rows,
            vec![
                json!({"id": "g", "name": "group", "group": true, "config": [{"id": "c", "name": "child", "config": {"x": 1}}]})
            ]
        );
        assert_eq!(
            warnings,
            vec!["[two] patch insert: entry \"c\" is not a group", "[two] patch insert: entry \"nope\" not found"]
        );
    }

    #[test]
    fn replacing_a_group_config_detaches_its_old_children() {
        let (rows, warnings) = rows_of(&[
            layer("one", "[{insert: [{id: g, name: group, group: true, config: [{id: old, name: o}]}]}]"),
            layer(
                "two",
                "[{id: g, config: [{id: new, name: n}]}, {id: old, disabled: true}, {id: new, disabled: true}]",
            ),
        ]);
        assert_eq!(rows[0]["config"], json!([{"id": "new", "name": "n"}]));
        assert_eq!(warnings, vec!["[two] patch: entry \"new\" not found"]);
    }

    #[test]
    fn enabled_rows_flatten_groups_and_skip_disabled_rows() {
        let composition = compose(
            Vec::new(),
            "cordis.yml",
            &[layer(
                "one",
                "[{insert: [{id: a, name: a}, {id: g, name: group, group: true, config: [{id: b, name: b}, {id: c, name: c, disabled: true}]}, {id: d, name: d, disabled: true}]}]",
            )],
        );
        let ids: Vec<&str> = composition.enabled_rows().iter().map(|row| row["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["a", "b"]);
    }

    #[test]
    fn provenance_names_the_inserting_layer_and_every_layer_that_changed_a_row() {
        let composition = compose(
            Vec::new(),
            "cordis.yml",
            &[
                layer("dsh-base", "[{insert: [{id: a, name: a}, {id: b, name: b}]}]"),
                layer("relay-retry", "[{insert: [{id: r, name: r}]}, {id: a, disabled: true}]"),
                layer("user.yml", "[{id: a, disabled: true}]"),
            ],
        );
        let labels: Vec<String> = composition.provenance.iter().map(Provenance::label).collect();
        assert_eq!(labels, ["dsh-base, patched by relay-retry", "dsh-base", "relay-retry"]);
        assert_eq!(composition.config_layer("r"), Some("relay-retry"));
    }

    #[test]
    fn a_key_set_after_every_layer_is_named_by_what_set_it_and_the_rest_by_its_layer() {
        let mut composition = compose(
            Vec::new(),
            "cordis.yml",
            &[layer(
                "user.yml",
                "[{insert: [{id: a, name: agent, config: {maxSteps: 0}}, {id: off, name: agent, disabled: true}, {id: g, name: group, group: true, config: [{id: b, name: agent}]}]}]",
            )],
        );
        let changed = composition.set_enabled_config("agent", "model", &Value::from("m"), "the command line (--model)");
        assert_eq!(changed, ["a", "b"], "enabled agent rows, a group's included");
        assert_eq!(composition.rows[0]["config"]["model"], "m");
        assert_eq!(composition.key_layer("a", "model"), Some("the command line (--model)"));
        assert_eq!(composition.key_layer("a", "maxSteps"), Some("user.yml"));
    }

    #[test]
    fn the_layer_that_set_a_config_last_is_remembered() {
        let composition = compose(
            Vec::new(),
            "cordis.yml",
            &[
                layer("base", "[{insert: [{id: a, name: a, config: {}}]}]"),
                layer("user.yml", "[{id: a, config: {x: 1}}]"),
            ],
        );
        assert_eq!(composition.config_layer("a"), Some("user.yml"));
    }

    fn ids_of(rows: &[Value]) -> Vec<&str> {
        rows.iter().map(|row| row["id"].as_str().unwrap()).collect()
    }

    #[test]
    fn inserted_rows_go_before_or_after_their_target() {
        let base = layer("base", "[{insert: [{id: a, name: a}, {id: llm-retry, name: llm-retry}, {id: z, name: z}]}]");
        let (rows, warnings) = rows_of(&[
            base.clone(),
            layer("pkg", "[{insert: [{id: p1, name: p}, {id: p2, name: p}], before: llm-retry}]"),
            layer("later", "[{insert: [{id: q, name: q}], after: a}, {id: p1, config: {x: 1}}]"),
        ]);
        assert_eq!(ids_of(&rows), ["a", "q", "p1", "p2", "llm-retry", "z"]);
        assert_eq!(rows[2]["config"], json!({"x": 1}), "moved rows stay targetable");
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn an_override_moves_its_row_and_the_keys_are_not_assigned() {
        let base = layer("base", "[{insert: [{id: a, name: a}, {id: b, name: b}, {id: c, name: c}]}]");
        let composition =
            compose(Vec::new(), "cordis.yml", &[base, layer("user.yml", "[{id: c, before: a, disabled: true}]")]);
        assert_eq!(ids_of(&composition.rows), ["c", "a", "b"]);
        assert_eq!(composition.rows[0], json!({"id": "c", "name": "c", "disabled": true}));
        let labels: Vec<String> = composition.provenance.iter().map(Provenance::label).collect();
        assert_eq!(labels, ["base, patched by user.yml", "base", "base"]);
    }

    #[test]
    fn a_missing_placement_target_is_a_warning_naming_file_and_entry() {
        let base = layer("base", "[{insert: [{id: a, name: a}]}]");
        let composition = compose(
            Vec::new(),
            "cordis.yml",
            &[
                base,
                layer(
                    "user.yml",
                    "[{insert: [{id: n, name: n}], before: nope}, {id: a, after: nope}, {id: a, before: a, after: n}, {insert: [{id: m, name: m}], before: 7}]",
                ),
            ],
        );
        assert_eq!(ids_of(&composition.rows), ["a", "n", "m"]);
        let shown: Vec<String> = composition.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "[user.yml] patch: before \"nope\" not found; the rows stay appended (patch entry 1)",
                "[user.yml] patch: after \"nope\" not found; row \"a\" keeps its place (patch entry 2)",
                "[user.yml] patch: an entry takes before or after, not both; placement ignored (patch entry 3)",
                "[user.yml] patch: before must be a row id (a non-empty string); placement ignored (patch entry 4)",
            ]
        );
    }

    #[test]
    fn placement_is_among_top_level_rows_only() {
        let (rows, warnings) = rows_of(&[
            layer("one", "[{insert: [{id: a, name: a}, {id: g, name: group, group: true, config: [{id: c, name: c}]}]}]"),
            layer("two", "[{insert: [{id: d, name: d}], id: g, before: c}, {id: c, before: a}, {insert: [{id: e, name: e}], before: c}]"),
        ]);
        assert_eq!(ids_of(&rows), ["a", "g", "e"]);
        assert_eq!(ids_of(rows[1]["config"].as_array().unwrap()), ["c", "d"]);
        assert_eq!(
            warnings,
            [
                "[two] patch insert: before places top-level rows only; the rows go to the end of group \"g\"",
                "[two] patch: before places top-level rows only; row \"c\" keeps its place",
                "[two] patch: before \"c\" is not a top-level row; the rows stay appended",
            ]
        );
    }

    #[test]
    fn unknown_keys_are_noted_with_a_guess_and_still_composed() {
        let composition = compose(
            Vec::new(),
            "cordis.yml",
            &[layer("user.yml", "[{insert: [{id: a, name: a, confg: {}}]}, {id: a, disable: true}]")],
        );
        assert_eq!(composition.rows[0]["disable"], true, "composed as the reference composes it");
        let shown: Vec<String> = composition.unknown_keys.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "[user.yml] row key \"confg\" is not one dsh reads (did you mean \"config\"?); it is kept on the row and does nothing (patch entry 1)",
                "[user.yml] patch entry key \"disable\" is not one dsh reads (did you mean \"disabled\"?); it is kept on the row and does nothing (patch entry 2)",
            ]
        );
        assert!(
            crate::is_typo_of("disable", "disabled")
                && crate::is_typo_of("nmae", "name")
                && !crate::is_typo_of("colour", "config")
        );
    }

    #[test]
    fn layer_shape_errors_name_the_file_and_entry() {
        let parse = |text: &str| Layer::parse("l", "user.yml", text).unwrap_err().to_string();
        assert_eq!(
            parse("id: a\n"),
            "overlay user.yml must be a top-level YAML array of loader patch entries (`[]` is the empty layer)"
        );
        assert_eq!(parse("- just-a-string\n"), "overlay entry 1 in user.yml must be a mapping (a loader patch entry)");
        assert!(parse("").contains("must be a top-level YAML array"));
        assert!(parse("# only a comment\n").contains("must be a top-level YAML array"));
        assert!(parse("- id: a\n  config: !!js env.X\n").starts_with("failed to parse overlay user.yml: line 2"));
        assert_eq!(parse("- insert: [x]\n"), "overlay entry 1 in user.yml: `insert` must be a list of rows (mappings)");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        const IDS: [&str; 4] = ["a", "b", "c", "g"];

        fn entry() -> impl Strategy<Value = Value> {
            let id = prop::sample::select(IDS.to_vec());
            prop_oneof![
                (id.clone(), 0..3u8).prop_map(|(id, v)| json!({"insert": [{"id": id, "name": format!("pkg-{id}"), "config": {"v": v}}]})),
                (id.clone(), id.clone()).prop_map(|(group, child)| json!({"insert": [{"id": format!("{child}{child}"), "name": "nested"}], "id": group})),
                (id.clone(), 0..3u8).prop_map(|(id, v)| json!({"id": id, "config": {"v": v}})),
                (id.clone(), any::<bool>()).prop_map(|(id, disabled)| json!({"id": id, "disabled": disabled})),
                id.clone().prop_map(|id| json!({"id": id, "name": "wrong", "disabled": true})),
                Just(json!({"insert": [{"id": "g", "name": "group", "group": true}]})),
            ]
        }

        fn layers() -> impl Strategy<Value = Vec<Layer>> {
            prop::collection::vec(prop::collection::vec(entry(), 0..5), 0..4).prop_map(|layers| {
                layers
                    .into_iter()
                    .enumerate()
                    .map(|(position, entries)| Layer {
                        label: format!("layer-{position}"),
                        entries: entries.into_iter().map(|entry| entry.as_object().unwrap().clone()).collect(),
                    })
                    .collect()
            })
        }

        fn enabled_ids(composition: &Composition) -> Vec<Value> {
            composition.enabled_rows().iter().map(|row| Value::Object((*row).clone())).collect()
        }

        proptest! {
            #[test]
            fn composing_is_deterministic(stack in layers()) {
                prop_assert_eq!(compose(Vec::new(), "cordis.yml", &stack), compose(Vec::new(), "cordis.yml", &stack));
            }

            #[test]
            fn an_override_of_a_missing_id_never_changes_the_result(stack in layers(), v in 0..3u8) {
                let mut extended = stack.clone();
                extended.push(Layer {
                    label: "extra".into(),
                    entries: vec![json!({"id": "never-inserted", "config": {"v": v}, "disabled": true}).as_object().unwrap().clone()],
                });
                let plain = compose(Vec::new(), "cordis.yml", &stack);
                let patched = compose(Vec::new(), "cordis.yml", &extended);
                prop_assert_eq!(&plain.rows, &patched.rows);
                prop_assert_eq!(patched.warnings.last().unwrap().reference_text(), "[extra] patch: entry \"never-inserted\" not found");
            }

            #[test]
            fn insert_then_disable_is_as_if_the_row_were_absent(stack in layers()) {
                let mut extended = stack.clone();
                extended.push(Layer {
                    label: "extra".into(),
                    entries: vec![
                        json!({"insert": [{"id": "fresh", "name": "pkg-fresh"}]}).as_object().unwrap().clone(),
                        json!({"id": "fresh", "disabled": true}).as_object().unwrap().clone(),
                    ],
                });
                let plain = compose(Vec::new(), "cordis.yml", &stack);
                let patched = compose(Vec::new(), "cordis.yml", &extended);
                prop_assert_eq!(enabled_ids(&plain), enabled_ids(&patched));
            }
        }
    }
}
