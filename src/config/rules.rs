//! `[[rules]]` as written in config.toml: a name, a matcher tree and
//! actions, kept as TOML values. The rules module (`rules::compile`)
//! checks and compiles them; every start does so before it binds a
//! listener (`wharf::check_config`), so a bad rule is refused as a bad
//! configuration, naming the rule and the field.

use serde::{Deserialize, Serialize};
use toml::Value;

/// One `[[rules]]` entry: a name, a matcher tree (`when`, absent for
/// every message) and the actions (`then`). See README "Rules" for the
/// forms they take.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDecl {
    /// Unique among the rules.
    pub name: String,
    /// The matcher tree.
    #[serde(default)]
    pub when: Option<Value>,
    /// The actions, in order.
    #[serde(default)]
    pub then: Vec<Value>,
}
