//! The CNCF Wasm OCI artifact layout (the one `wkg oci`, Spin, wasmCloud and
//! Wassette use): an image manifest whose config is
//! `application/vnd.wasm.config.v0+json` and whose one layer is the
//! component, `application/wasm`.
//!
//! Owns: building a component's config and manifest for a push (with
//! annotations from the component's own metadata), and reading a pulled
//! manifest, refusing one that is not a component. Written here rather than
//! taken from `oci-wasm`: that crate is built on wit-component 0.253 and
//! oci-client 0.17 (reqwest 0.13), a second copy of both beside the host's,
//! and its pull holds the whole layer in memory; the layout itself is these
//! few types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{OciError, Result};

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
pub const ARCHITECTURE: &str = "wasm";
/// The `os` of a component (a core module would be `wasip1`).
pub const COMPONENT_OS: &str = "wasip2";

/// The annotations a push fills from the component's metadata.
pub const TITLE: &str = "org.opencontainers.image.title";
pub const VERSION: &str = "org.opencontainers.image.version";
pub const DESCRIPTION: &str = "org.opencontainers.image.description";
pub const SOURCE: &str = "org.opencontainers.image.source";
pub const LICENSES: &str = "org.opencontainers.image.licenses";
pub const AUTHORS: &str = "org.opencontainers.image.authors";
pub const URL: &str = "org.opencontainers.image.url";
pub const REVISION: &str = "org.opencontainers.image.revision";
pub const CREATED: &str = "org.opencontainers.image.created";

/// The `created` time of a push, RFC 3339: `$SOURCE_DATE_EPOCH` when set
/// (so a reproducible build pushes a reproducible manifest), else now.
pub fn created_now() -> String {
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok());
    let time = match epoch.and_then(|secs| chrono::DateTime::from_timestamp(secs, 0)) {
        Some(time) => time,
        None => chrono::Utc::now(),
    };
    time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `sha256:` and the hex SHA-256 of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A content descriptor: what a manifest says of a blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An OCI image manifest, as far as this layout and cosign's use it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Manifest {
    /// The manifest's JSON, the bytes whose digest names it.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a manifest serialises")
    }
}

/// The config blob of a Wasm artifact.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    pub created: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    pub architecture: String,
    pub os: String,
    pub layer_digests: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<ComponentInfo>,
}

/// What the config says of the component's world.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ComponentInfo {
    pub exports: Vec<String>,
    pub imports: Vec<String>,
    pub target: Option<String>,
}

/// A component ready to push: its config and manifest, built once.
#[derive(Debug, Clone)]
pub struct Artifact {
    pub config: Vec<u8>,
    pub manifest: Manifest,
    pub layer: Descriptor,
}

impl Artifact {
    /// The artifact for `component` (its bytes): the config with its world's
    /// imports and exports, the manifest with annotations from its metadata
    /// and then `extra` (which wins). `created` is RFC 3339.
    pub fn build(
        component: &[u8],
        created: &str,
        extra: &BTreeMap<String, String>,
    ) -> Result<Artifact> {
        check_component_header(component).map_err(OciError::Invalid)?;
        let info = component_info(component).map_err(OciError::Invalid)?;
        let layer = Descriptor {
            media_type: LAYER_MEDIA_TYPE.to_string(),
            digest: digest_of(component),
            size: component.len() as u64,
            annotations: BTreeMap::new(),
        };
        let config = WasmConfig {
            created: created.to_string(),
            author: None,
            architecture: ARCHITECTURE.to_string(),
            os: COMPONENT_OS.to_string(),
            layer_digests: vec![layer.digest.clone()],
            component: Some(info),
        };
        let config = serde_json::to_vec(&config).expect("a config serialises");
        let mut annotations = annotations_from_metadata(component);
        annotations.insert(CREATED.to_string(), created.to_string());
        annotations.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(MANIFEST_MEDIA_TYPE.to_string()),
            config: Descriptor {
                media_type: CONFIG_MEDIA_TYPE.to_string(),
                digest: digest_of(&config),
                size: config.len() as u64,
                annotations: BTreeMap::new(),
            },
            layers: vec![layer.clone()],
            annotations,
        };
        Ok(Artifact {
            config,
            manifest,
            layer,
        })
    }
}

/// Refuses bytes that do not start as a component (a core module, or not
/// Wasm at all), from their first 8 bytes.
pub fn check_component_header(bytes: &[u8]) -> std::result::Result<(), String> {
    const MAGIC: &[u8; 4] = b"\0asm";
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err("its bytes are not WebAssembly (no `\\0asm` header)".into());
    }
    // Version 1 with layer 0 is a core module; layer 1 a component.
    match bytes[6..8] {
        [1, 0] => Ok(()),
        [0, 0] => Err(
            "it is a core Wasm module, not a component; build a component (`host skill build`)"
                .into(),
        ),
        _ => Err("it is WebAssembly of an unknown layer, not a component".into()),
    }
}

/// The imports and exports of the component's world, as `wkg` writes them.
pub fn component_info(component: &[u8]) -> std::result::Result<ComponentInfo, String> {
    let decoded = wit_component::decode(component)
        .map_err(|e| format!("cannot decode the component's WIT: {e:#}"))?;
    let wit_component::DecodedWasm::Component(resolve, world) = decoded else {
        return Err("it is a WIT package, not a component".into());
    };
    let world = &resolve.worlds[world];
    Ok(ComponentInfo {
        exports: world
            .exports
            .keys()
            .map(|key| resolve.name_world_key(key))
            .collect(),
        imports: world
            .imports
            .keys()
            .map(|key| resolve.name_world_key(key))
            .collect(),
        target: None,
    })
}

/// The OCI annotations the component's own metadata gives (its name, and
/// the `version`, `description`, `source`, `licenses`, `authors`,
/// `homepage` and `revision` custom sections), none when it has none.
pub fn annotations_from_metadata(component: &[u8]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(wasm_metadata::Payload::Component { metadata, .. }) =
        wasm_metadata::Payload::from_binary(component)
    else {
        return out;
    };
    let mut put = |key: &str, value: Option<String>| {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            out.insert(key.to_string(), value);
        }
    };
    put(TITLE, metadata.name.clone());
    put(VERSION, metadata.version.as_ref().map(|v| v.to_string()));
    put(
        DESCRIPTION,
        metadata.description.as_ref().map(|v| v.to_string()),
    );
    put(SOURCE, metadata.source.as_ref().map(|v| v.to_string()));
    put(LICENSES, metadata.licenses.as_ref().map(|v| v.to_string()));
    put(AUTHORS, metadata.authors.as_ref().map(|v| v.to_string()));
    put(URL, metadata.homepage.as_ref().map(|v| v.to_string()));
    put(REVISION, metadata.revision.as_ref().map(|v| v.to_string()));
    out
}

/// Parses `--annotation KEY=VALUE`.
pub fn parse_annotation(text: &str) -> Result<(String, String)> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err(OciError::Invalid(format!(
            "annotation `{text}` is not KEY=VALUE, e.g. `org.opencontainers.image.vendor=Acme`"
        ))),
    }
}

/// A pulled manifest that describes a component.
#[derive(Debug, Clone)]
pub struct ComponentManifest {
    pub manifest: Manifest,
    /// The one `application/wasm` layer.
    pub layer: Descriptor,
}

impl ComponentManifest {
    /// Reads `bytes` as the manifest of `reference`, refusing anything but
    /// one Wasm config and one `application/wasm` layer.
    pub fn parse(bytes: &[u8], reference: &str) -> Result<ComponentManifest> {
        let not = |reason: String| OciError::NotAComponent {
            reference: reference.to_string(),
            reason,
        };
        let manifest: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| not(format!("its manifest is not an OCI image manifest ({e})")))?;
        if let Some(media_type) = &manifest.media_type
            && media_type != MANIFEST_MEDIA_TYPE
        {
            return Err(not(format!(
                "its manifest is `{media_type}`, not `{MANIFEST_MEDIA_TYPE}`"
            )));
        }
        if manifest.config.media_type != CONFIG_MEDIA_TYPE {
            return Err(not(format!(
                "its config is `{}`, not `{CONFIG_MEDIA_TYPE}`",
                manifest.config.media_type
            )));
        }
        let layer = match manifest.layers.as_slice() {
            [layer] if layer.media_type == LAYER_MEDIA_TYPE => layer.clone(),
            layers => {
                let types: Vec<&str> = layers.iter().map(|l| l.media_type.as_str()).collect();
                return Err(not(format!(
                    "it has {} layer(s) ({}), not one `{LAYER_MEDIA_TYPE}` layer",
                    layers.len(),
                    types.join(", ")
                )));
            }
        };
        for descriptor in [&manifest.config, &layer] {
            crate::reference::parse_digest(&descriptor.digest)
                .map_err(|e| not(format!("its manifest names a bad blob: {e}")))?;
        }
        Ok(ComponentManifest { manifest, layer })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo() -> Vec<u8> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../skills/dist/echo.wasm");
        std::fs::read(path).expect("skills/dist/echo.wasm")
    }

    #[test]
    fn builds_the_wasm_layout_with_the_components_metadata() {
        let bytes = echo();
        let extra = BTreeMap::from([(DESCRIPTION.to_string(), "Echoes".to_string())]);
        let artifact = Artifact::build(&bytes, "2026-01-01T00:00:00Z", &extra).unwrap();
        let m = &artifact.manifest;
        assert_eq!(m.config.media_type, CONFIG_MEDIA_TYPE);
        assert_eq!(m.layers.len(), 1);
        assert_eq!(m.layers[0].media_type, LAYER_MEDIA_TYPE);
        assert_eq!(m.layers[0].digest, digest_of(&bytes));
        assert_eq!(m.annotations[TITLE], "echo");
        assert_eq!(m.annotations[VERSION], "0.1.0");
        assert_eq!(m.annotations[LICENSES], "Apache-2.0");
        assert_eq!(m.annotations[DESCRIPTION], "Echoes");
        let config: WasmConfig = serde_json::from_slice(&artifact.config).unwrap();
        assert_eq!(
            (config.architecture.as_str(), config.os.as_str()),
            ("wasm", "wasip2")
        );
        assert_eq!(config.layer_digests, vec![digest_of(&bytes)]);
        let info = config.component.unwrap();
        assert!(info.exports.contains(&"run".to_string()), "{info:?}");
        assert!(
            info.imports
                .iter()
                .any(|i| i.starts_with("skillhost:skill/log"))
        );
        // What was built reads back as a component manifest.
        let parsed = ComponentManifest::parse(&m.to_bytes(), "r").unwrap();
        assert_eq!(parsed.layer, artifact.layer);
    }

    #[test]
    fn refuses_what_is_not_a_component() {
        let core = wat::parse_str("(module)").unwrap();
        let err = Artifact::build(&core, "t", &BTreeMap::new()).unwrap_err();
        assert!(err.to_string().contains("core Wasm module"), "{err}");
        let err = Artifact::build(b"hello world", "t", &BTreeMap::new()).unwrap_err();
        assert!(err.to_string().contains("not WebAssembly"), "{err}");

        let image = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
            "config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:00","size":2},
            "layers":[]}"#;
        let err = ComponentManifest::parse(image, "r:1")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("application/vnd.oci.image.config.v1+json"),
            "{err}"
        );
        let err = ComponentManifest::parse(b"[]", "r:1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an OCI image manifest"), "{err}");
    }

    #[test]
    fn annotations_are_key_value() {
        assert_eq!(
            parse_annotation("a.b=c=d").unwrap(),
            ("a.b".to_string(), "c=d".to_string())
        );
        assert!(parse_annotation("novalue").is_err());
        assert!(parse_annotation("=x").is_err());
    }
}
