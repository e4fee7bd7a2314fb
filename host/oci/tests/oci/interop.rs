//! Clients nobody here wrote read what this crate pushes, and this crate
//! pulls what they push: `skopeo` (Debian), the `oras` Python SDK (PyPI),
//! and Python's `cryptography` verifying a signature from cosign's layout.

use skillhost_oci::{ComponentRef, OciError, PrivateKey, ResolveOptions};
use skillhost_tests::registry::{TestRegistry, python, skopeo, write_file};

use super::{cache, no_policy, push, resolver};

/// `oras` pulls a reference; prints the manifest and the pulled files.
const ORAS_PULL: &str = r#"
import json, sys, oras.provider
target, outdir = sys.argv[1], sys.argv[2]
registry = oras.provider.Registry(insecure=True)
manifest = registry.get_manifest(target)
files = registry.pull(target=target, outdir=outdir)
print(json.dumps({"manifest": manifest, "files": files}))
"#;

/// `oras` pushes a file as one layer of `media_type` with a config file.
const ORAS_PUSH: &str = r#"
import sys, oras.provider
target, layer, media_type, config, config_type = sys.argv[1:6]
registry = oras.provider.Registry(insecure=True)
registry.push(target=target, files=[f"{layer}:{media_type}"],
              manifest_config=f"{config}:{config_type}", disable_path_validation=True)
"#;

#[test]
fn skopeo_and_oras_read_what_host_pushes() {
    let registry = TestRegistry::start();
    let pushed = push(&registry, "echo", "skills/echo:0.1.0");
    let target = format!("{}/skills/echo:0.1.0", registry.address());

    let raw = skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{target}"),
    ]);
    assert_eq!(
        skillhost_oci::layout::digest_of(raw.as_bytes()),
        pushed.digest
    );
    let manifest: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    let config = skopeo(&[
        "inspect",
        "--config",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{target}"),
    ]);
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(
        (config["architecture"].as_str(), config["os"].as_str()),
        (Some("wasm"), Some("wasip2"))
    );

    let out = tempfile::tempdir().unwrap();
    let pulled: serde_json::Value =
        serde_json::from_str(&python(ORAS_PULL, &[&target, out.path().to_str().unwrap()])).unwrap();
    assert_eq!(
        pulled["manifest"]["layers"][0]["mediaType"],
        "application/wasm"
    );
    assert_eq!(
        pulled["manifest"]["annotations"]["org.opencontainers.image.title"],
        "echo"
    );
    let file = pulled["files"][0].as_str().unwrap();
    assert_eq!(
        std::fs::read(file).unwrap(),
        std::fs::read(skillhost_tests::dist("echo")).unwrap(),
        "oras gets the same bytes"
    );
}

#[test]
fn host_pulls_a_component_oras_pushed_and_refuses_what_is_not_one() {
    let registry = TestRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let component = std::fs::read(skillhost_tests::dist("text-stats")).unwrap();
    let layer = write_file(dir.path(), "text-stats.wasm", &component);
    let config = write_file(
        dir.path(),
        "config.json",
        br#"{"created":"2026-01-01T00:00:00Z","architecture":"wasm","os":"wasip2","layerDigests":[]}"#,
    );
    let push_with_oras =
        |tag: &str, layer: &std::path::Path, media_type: &str, config_type: &str| {
            let target = format!("{}/skills/{tag}", registry.address());
            python(
                ORAS_PUSH,
                &[
                    &target,
                    layer.to_str().unwrap(),
                    media_type,
                    config.to_str().unwrap(),
                    config_type,
                ],
            );
            ComponentRef::parse(&target).unwrap()
        };
    let resolver = resolver(cache(dir.path()), ResolveOptions::default());

    let good = push_with_oras(
        "stats:1",
        &layer,
        "application/wasm",
        "application/vnd.wasm.config.v0+json",
    );
    let resolved = resolver.fetch(&good, &no_policy()).unwrap();
    assert_eq!(std::fs::read(&resolved.path).unwrap(), component);

    let generic = push_with_oras(
        "stats:generic",
        &layer,
        "application/octet-stream",
        "application/vnd.oci.image.config.v1+json",
    );
    let err = resolver.fetch(&generic, &no_policy()).unwrap_err();
    assert!(matches!(err, OciError::NotAComponent { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("application/vnd.oci.image.config.v1+json"),
        "{err}"
    );

    let text = write_file(dir.path(), "notes.txt", b"not a component at all");
    let fake = push_with_oras(
        "stats:text",
        &text,
        "application/wasm",
        "application/vnd.wasm.config.v0+json",
    );
    let err = resolver.fetch(&fake, &no_policy()).unwrap_err();
    assert!(matches!(err, OciError::NotAComponent { .. }), "{err}");
    assert!(err.to_string().contains("not WebAssembly"), "{err}");
    let layer_digest = skillhost_oci::layout::digest_of(b"not a component at all");
    assert!(
        !resolver.cache().has_blob(&layer_digest),
        "nothing was stored"
    );

    let core = write_file(
        dir.path(),
        "core.wasm",
        &wat::parse_str("(module)").unwrap(),
    );
    let module = push_with_oras(
        "stats:core",
        &core,
        "application/wasm",
        "application/vnd.wasm.config.v0+json",
    );
    let err = resolver.fetch(&module, &no_policy()).unwrap_err();
    assert!(err.to_string().contains("core Wasm module"), "{err}");
}

/// Fetches the signature manifest with `oras`, and checks each layer's
/// signature over its payload with `cryptography`'s ECDSA P-256/SHA-256.
const VERIFY_COSIGN_LAYOUT: &str = r#"
import base64, hashlib, json, sys, tempfile, oras.provider
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
repository, digest, public_key = sys.argv[1:4]
registry = oras.provider.Registry(insecure=True)
tag = digest.replace(":", "-", 1) + ".sig"
manifest = registry.get_manifest(f"{repository}:{tag}")
key = serialization.load_pem_public_key(open(public_key, "rb").read())
verified = 0
for layer in manifest["layers"]:
    assert layer["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json", layer
    with tempfile.NamedTemporaryFile() as f:
        registry.download_blob(repository, layer["digest"], f.name)
        payload = open(f.name, "rb").read()
    assert "sha256:" + hashlib.sha256(payload).hexdigest() == layer["digest"]
    claims = json.loads(payload)
    assert claims["critical"]["image"]["docker-manifest-digest"] == digest, claims
    assert claims["critical"]["type"] == "cosign container image signature", claims
    signature = base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"])
    key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
    verified += 1
print(verified)
"#;

#[test]
fn a_signature_verifies_with_an_implementation_not_written_here() {
    let registry = TestRegistry::start();
    let pushed = push(&registry, "echo", "skills/echo:1");
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = (dir.path().join("k.key"), dir.path().join("k.pub"));
    PrivateKey::generate()
        .write(&private, &public, false)
        .unwrap();
    let key = PrivateKey::load(&private).unwrap();
    let resolver = resolver(cache(dir.path()), ResolveOptions::default());
    let reference = ComponentRef::parse(&registry.reference("skills/echo:1")).unwrap();
    resolver.sign(&reference, &key).unwrap();

    let repository = format!("{}/skills/echo", registry.address());
    let verified = python(
        VERIFY_COSIGN_LAYOUT,
        &[&repository, &pushed.digest, public.to_str().unwrap()],
    );
    assert_eq!(verified.trim(), "1");
}
