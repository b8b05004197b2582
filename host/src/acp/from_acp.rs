//! ACP → host conversions.

use crate::mcp::{ServerSpec, Transport};
use crate::model::PromptImage;
use agent_client_protocol::v1::schema::{
    ContentBlock, EmbeddedResourceResource, InitializeRequest, McpServer,
};

/// Whether the client renders terminals fed through `_meta` (Zed's `terminal_output`).
pub(super) fn wants_terminal_output(request: &InitializeRequest) -> bool {
    request
        .client_capabilities
        .meta
        .as_ref()
        .and_then(|meta| meta.get("terminal_output"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// The user's prompt: the text the model reads (naming each image `[image N]`), the blocks
/// as sent (for the log) and the images (for models that take them).
pub(super) fn prompt(blocks: &[ContentBlock]) -> crate::session::Prompt {
    let images: Vec<PromptImage> = blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Image(image) => {
                Some(PromptImage { mime_type: image.mime_type.clone(), data: image.data.clone() })
            }
            _ => None,
        })
        .collect();
    crate::session::Prompt {
        text: prompt_text(blocks),
        blocks: blocks.iter().filter_map(|b| serde_json::to_value(b).ok()).collect(),
        images,
    }
}

/// The user's prompt as text for the model. Resources are inlined or named; media the host
/// cannot pass on is named, so the model knows something was there.
fn prompt_text(blocks: &[ContentBlock]) -> String {
    let mut images = 0;
    let parts: Vec<String> = blocks
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::ResourceLink(link) => format!("[resource: {}]", link.uri),
            ContentBlock::Resource(embedded) => match &embedded.resource {
                EmbeddedResourceResource::TextResourceContents(contents) => {
                    format!("[resource: {}]\n{}", contents.uri, contents.text)
                }
                EmbeddedResourceResource::BlobResourceContents(contents) => {
                    format!("[binary resource omitted: {}]", contents.uri)
                }
                _ => "[resource omitted]".to_owned(),
            },
            ContentBlock::Image(_) => {
                images += 1;
                format!("[image {images}]")
            }
            ContentBlock::Audio(_) => "[audio omitted: not supported by hotsh yet]".to_owned(),
            _ => "[content omitted: unknown kind]".to_owned(),
        })
        .collect();
    parts.join("\n")
}

/// The MCP servers a client named (`session/new`, `session/load`, `session/resume`).
pub(super) fn mcp_servers(servers: &[McpServer]) -> Vec<ServerSpec> {
    servers.iter().map(mcp_server).collect()
}

fn mcp_server(server: &McpServer) -> ServerSpec {
    let (name, transport) = match server {
        McpServer::Stdio(stdio) => (
            stdio.name.clone(),
            Transport::Stdio {
                command: stdio.command.clone(),
                args: stdio.args.clone(),
                env: stdio.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect(),
            },
        ),
        McpServer::Http(http) => (
            http.name.clone(),
            Transport::Http {
                url: http.url.clone(),
                headers: http.headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
            },
        ),
        McpServer::Sse(sse) => (
            sse.name.clone(),
            Transport::Unsupported(
                "the SSE transport (deprecated in MCP) is not supported; use the server's \
                 streamable HTTP endpoint"
                    .to_owned(),
            ),
        ),
        _ => (
            "unnamed".to_owned(),
            Transport::Unsupported("this MCP transport is not supported".to_owned()),
        ),
    };
    ServerSpec { name, transport }
}
