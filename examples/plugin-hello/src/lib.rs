//! A minimal hotsh plugin with one tool, `hello`, that greets someone.
//!
//! Everything a plugin does goes through four functions of the [`Plugin`] trait: say what it
//! is (`manifest`), what tools it offers (`tools`), run a call (`invoke`), and draw the call's
//! card in the client (`present_call`, `present_result`). `export_plugin!` does the rest,
//! including turning any panic into an error the model reads.

use hotsh_abi::{
    Card, CardStatus, FinalCard, GenericCard, HostRef, Manifest, Plugin, PromptSection, ROption,
    ToolCall, ToolKind, ToolOutput, ToolSpec,
};
use serde::Deserialize;

/// The greeting; change it, run `cargo build`, and a running hotsh serves the new text.
const GREETING: &str = "Hello";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HelloArgs {
    name: String,
}

struct Hello;

impl Plugin for Hello {
    fn manifest() -> Manifest {
        Manifest::new("hello", env!("CARGO_PKG_VERSION"))
    }

    fn tools() -> Vec<ToolSpec> {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"name": {"type": "string", "description": "Who to greet."}},
            "required": ["name"],
            "additionalProperties": false
        });
        vec![ToolSpec::new("hello", "Greets someone by name.", &schema)]
    }

    fn prompt_sections() -> Vec<PromptSection> {
        vec![PromptSection::new("tool:hello", 200, "Use `hello` when the user asks to be greeted.")]
    }

    fn invoke(call: &ToolCall, _host: &HostRef<'_>) -> Result<ToolOutput, String> {
        // `_host` runs commands (`_host.run(...)`) and logs; this tool needs neither.
        let args: HelloArgs = call.arguments()?;
        let text = format!("{GREETING}, {}!", args.name);
        Ok(ToolOutput::new(text.clone(), &serde_json::json!({ "greeting": text })))
    }

    fn present_call(call: &ToolCall) -> Result<Card, String> {
        let args: HelloArgs = call.arguments()?;
        Ok(Card::Generic(GenericCard::new(format!("Greet {}", args.name), ToolKind::Other, None)))
    }

    fn present_result(call: &ToolCall, output: &ToolOutput) -> Result<FinalCard, String> {
        let Card::Generic(mut card) = Self::present_call(call)? else {
            return Err("hello cards are generic".to_owned());
        };
        card.content = ROption::RSome(output.text.clone());
        Ok(FinalCard::new(Card::Generic(card), CardStatus::Completed))
    }
}

hotsh_abi::export_plugin!(Hello);
