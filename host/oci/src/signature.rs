//! Component signatures in cosign's key-based layout, so cosign and other
//! tools that read it verify what `host skill sign` signs:
//!
//! - the signature of the manifest `sha256:HEX` is an OCI manifest tagged
//!   `sha256-HEX.sig` in the same repository, one layer per signature;
//! - each layer (`application/vnd.dev.cosign.simplesigning.v1+json`) is a
//!   simple-signing payload naming the repository and the manifest digest,
//!   and carries its signature in the annotation
//!   `dev.cosignproject.cosign/signature`: base64 of the ASN.1 DER ECDSA
//!   P-256 signature over the payload's SHA-256 (cosign's key type).
//!
//! Keys are PEM files: `host skill keygen` writes a PKCS#8 private key (mode
//! 0600, unencrypted) and its SubjectPublicKeyInfo public key, the format of
//! `cosign.pub`, so `cosign verify --key` takes it.
//!
//! Owns: keys, payloads, signing, verification and the signature manifest's
//! shape. Must not: talk to a registry (`registry.rs` moves the bytes).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{OciError, Result};
use crate::layout::{Descriptor, MANIFEST_MEDIA_TYPE, Manifest, digest_of};

pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
pub const IMAGE_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const SIGNATURE_TYPE: &str = "cosign container image signature";

/// The tag of the signatures of `digest` (`sha256-HEX.sig`).
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

/// A private key that signs.
pub struct PrivateKey {
    key: SigningKey,
}

/// A public key a trust policy names.
#[derive(Debug, Clone)]
pub struct PublicKey {
    key: VerifyingKey,
    /// The file it was read from.
    pub path: PathBuf,
}

impl PublicKey {
    /// Reads a PEM `PUBLIC KEY` (SubjectPublicKeyInfo, P-256).
    pub fn load(path: &Path) -> Result<PublicKey> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| OciError::file(path, format!("cannot read the public key: {e}")))?;
        let key = VerifyingKey::from_public_key_pem(text.trim()).map_err(|e| {
            OciError::file(
                path,
                format!(
                    "not an ECDSA P-256 public key in PEM ({e}); give the `.pub` file \
                     `host skill keygen` (or `cosign generate-key-pair`) wrote"
                ),
            )
        })?;
        Ok(PublicKey {
            key,
            path: path.to_path_buf(),
        })
    }

    /// A key not read from a file (the public half of a private key).
    pub fn from_key(key: VerifyingKey) -> PublicKey {
        PublicKey {
            key,
            path: PathBuf::from("(the signing key)"),
        }
    }

    /// A short name for messages: the first 16 hex digits of the SHA-256 of
    /// the key's DER encoding, and its file.
    pub fn describe(&self) -> String {
        format!("{} ({})", fingerprint(&self.key), self.path.display())
    }
}

fn fingerprint(key: &VerifyingKey) -> String {
    let der = key
        .to_public_key_der()
        .expect("a P-256 public key encodes as DER");
    hex::encode(&Sha256::digest(der.as_bytes())[..8])
}

impl PrivateKey {
    /// Reads a PEM private key: PKCS#8 (`PRIVATE KEY`, as `host skill keygen`
    /// writes it) or SEC1 (`EC PRIVATE KEY`, as `openssl ecparam` does).
    pub fn load(path: &Path) -> Result<PrivateKey> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| OciError::file(path, format!("cannot read the private key: {e}")))?;
        let text = text.trim();
        if text.contains("ENCRYPTED SIGSTORE PRIVATE KEY") || text.contains("ENCRYPTED COSIGN") {
            return Err(OciError::file(
                path,
                "a cosign-encrypted private key, which the host does not decrypt; make a key \
                 with `host skill keygen` (cosign verifies its signatures with the `.pub`)",
            ));
        }
        let key = SigningKey::from_pkcs8_pem(text)
            .or_else(|_| p256::SecretKey::from_sec1_pem(text).map(SigningKey::from))
            .map_err(|_| {
                OciError::file(
                    path,
                    "not an unencrypted ECDSA P-256 private key in PEM (PKCS#8 or SEC1); make \
                     one with `host skill keygen`",
                )
            })?;
        Ok(PrivateKey { key })
    }

    /// A new key pair.
    pub fn generate() -> PrivateKey {
        PrivateKey {
            key: SigningKey::random(&mut rand_core::OsRng),
        }
    }

    /// Writes the private key to `private` (mode 0600) and its public key to
    /// `public`; neither may exist unless `force`.
    pub fn write(&self, private: &Path, public: &Path, force: bool) -> Result<()> {
        let pem = self
            .key
            .to_pkcs8_pem(LineEnding::LF)
            .map_err(|e| OciError::file(private, format!("cannot encode the key: {e}")))?;
        let public_pem = self
            .key
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| OciError::file(public, format!("cannot encode the key: {e}")))?;
        for path in [private, public] {
            if !force && path.exists() {
                return Err(OciError::file(
                    path,
                    "already exists; pass --force to replace it (the old key's signatures \
                     then no longer verify against the new one)",
                ));
            }
        }
        write_file(private, pem.as_bytes(), 0o600)?;
        write_file(public, public_pem.as_bytes(), 0o644)
    }

    /// The public half.
    pub fn public_key(&self) -> VerifyingKey {
        *self.key.verifying_key()
    }

    /// The fingerprint of the public half, as [`PublicKey::describe`] shows.
    pub fn fingerprint(&self) -> String {
        fingerprint(self.key.verifying_key())
    }

    /// The base64 DER signature of `payload`.
    pub fn sign(&self, payload: &[u8]) -> String {
        let signature: Signature = self.key.sign(payload);
        base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes())
    }
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| OciError::file(path, format!("cannot write: {e}")))?;
    file.write_all(bytes)
        .map_err(|e| OciError::file(path, format!("cannot write: {e}")))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| OciError::file(path, format!("cannot set its mode: {e}")))?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    file.persist(path)
        .map_err(|e| OciError::file(path, format!("cannot write: {}", e.error)))?;
    Ok(())
}

/// The simple-signing payload cosign signs.
#[derive(Debug, Serialize, Deserialize)]
pub struct Payload {
    pub critical: Critical,
    pub optional: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Critical {
    pub identity: Identity,
    pub image: Image,
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Identity {
    #[serde(rename = "docker-reference")]
    pub docker_reference: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Image {
    #[serde(rename = "docker-manifest-digest")]
    pub docker_manifest_digest: String,
}

/// The payload that signs `digest` as a manifest of `repository`
/// (`REGISTRY/REPOSITORY`).
pub fn payload(repository: &str, digest: &str) -> Vec<u8> {
    let payload = Payload {
        critical: Critical {
            identity: Identity {
                docker_reference: repository.to_string(),
            },
            image: Image {
                docker_manifest_digest: digest.to_string(),
            },
            kind: SIGNATURE_TYPE.to_string(),
        },
        optional: None,
    };
    serde_json::to_vec(&payload).expect("a payload serialises")
}

/// One signature: its payload and the layer that carries it.
#[derive(Debug, Clone)]
pub struct SignatureLayer {
    pub payload: Vec<u8>,
    pub layer: Descriptor,
}

impl SignatureLayer {
    /// Signs `digest` (of `repository`) with `key`.
    pub fn new(key: &PrivateKey, repository: &str, digest: &str) -> SignatureLayer {
        let payload = payload(repository, digest);
        let signature = key.sign(&payload);
        SignatureLayer {
            layer: Descriptor {
                media_type: PAYLOAD_MEDIA_TYPE.to_string(),
                digest: digest_of(&payload),
                size: payload.len() as u64,
                annotations: BTreeMap::from([(SIGNATURE_ANNOTATION.to_string(), signature)]),
            },
            payload,
        }
    }
}

/// The signature manifest holding `layers` (cosign's shape: an image config
/// listing the payloads as its layers' diff ids), and its config blob.
pub fn signature_manifest(layers: &[Descriptor]) -> (Manifest, Vec<u8>) {
    let config = serde_json::json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {
            "type": "layers",
            "diff_ids": layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>(),
        },
        "config": {},
    });
    let config = serde_json::to_vec(&config).expect("a config serialises");
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.to_string()),
        config: Descriptor {
            media_type: IMAGE_CONFIG_MEDIA_TYPE.to_string(),
            digest: digest_of(&config),
            size: config.len() as u64,
            annotations: BTreeMap::new(),
        },
        layers: layers.to_vec(),
        annotations: BTreeMap::new(),
    };
    (manifest, config)
}

/// Checks that one of `signatures` (payload bytes and their layer) signs
/// `digest` with one of `keys`; returns that key. The payload's digest must
/// be `digest` and its type cosign's; its identity is not compared with the
/// repository, so a component copied to another registry with its
/// signature still verifies (as `cosign verify` does by default).
pub fn verify<'k>(
    digest: &str,
    signatures: &[SignatureLayer],
    keys: &'k [PublicKey],
) -> std::result::Result<&'k PublicKey, String> {
    if signatures.is_empty() {
        return Err(format!(
            "it is not signed (no `{}` signature manifest next to it)",
            signature_tag(digest)
        ));
    }
    let mut problems = Vec::new();
    for signature in signatures {
        let payload: Payload = match serde_json::from_slice(&signature.payload) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!("a payload is not simple-signing JSON ({e})"));
                continue;
            }
        };
        if payload.critical.image.docker_manifest_digest != digest {
            problems.push(format!(
                "a signature signs {} instead",
                payload.critical.image.docker_manifest_digest
            ));
            continue;
        }
        if payload.critical.kind != SIGNATURE_TYPE {
            problems.push(format!(
                "a payload's type is `{}`, not `{SIGNATURE_TYPE}`",
                payload.critical.kind
            ));
            continue;
        }
        let Some(encoded) = signature.layer.annotations.get(SIGNATURE_ANNOTATION) else {
            problems.push(format!(
                "a layer has no `{SIGNATURE_ANNOTATION}` annotation"
            ));
            continue;
        };
        let Ok(der) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            problems.push("a signature is not base64".to_string());
            continue;
        };
        let Ok(parsed) = Signature::from_der(&der) else {
            problems.push("a signature is not a DER ECDSA P-256 signature".to_string());
            continue;
        };
        if let Some(key) = keys
            .iter()
            .find(|k| k.key.verify(&signature.payload, &parsed).is_ok())
        {
            return Ok(key);
        }
        problems.push("a signature was made with a key the policy does not list".to_string());
    }
    let keys: Vec<String> = keys.iter().map(PublicKey::describe).collect();
    Err(format!(
        "none of its {} signature(s) verifies with the trusted key(s) {}: {}",
        signatures.len(),
        keys.join(", "),
        problems.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn keys(dir: &Path, name: &str) -> (PrivateKey, PublicKey) {
        let key = PrivateKey::generate();
        let (private, public) = (
            dir.join(format!("{name}.key")),
            dir.join(format!("{name}.pub")),
        );
        key.write(&private, &public, false).unwrap();
        (
            PrivateKey::load(&private).unwrap(),
            PublicKey::load(&public).unwrap(),
        )
    }

    #[test]
    fn signs_and_verifies_with_the_right_key_only() {
        let dir = tempfile::tempdir().unwrap();
        let (alice, alice_pub) = keys(dir.path(), "alice");
        let (mallory, mallory_pub) = keys(dir.path(), "mallory");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.path().join("alice.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let signed = SignatureLayer::new(&alice, "127.0.0.1:5000/skills/echo", DIGEST);
        assert_eq!(
            signed.layer.digest,
            digest_of(&signed.payload),
            "the layer is the payload"
        );
        let trusted = [alice_pub.clone()];
        assert!(verify(DIGEST, std::slice::from_ref(&signed), &trusted).is_ok());

        let err = verify(DIGEST, &[], &trusted).unwrap_err();
        assert!(err.contains("not signed"), "{err}");
        let wrong = SignatureLayer::new(&mallory, "127.0.0.1:5000/skills/echo", DIGEST);
        let err = verify(DIGEST, std::slice::from_ref(&wrong), &trusted).unwrap_err();
        assert!(err.contains("key the policy does not list"), "{err}");
        assert!(verify(DIGEST, &[wrong, signed.clone()], &trusted).is_ok());
        let other = DIGEST.replace('0', "f");
        let err = verify(&other, &[signed], &[mallory_pub, alice_pub]).unwrap_err();
        assert!(err.contains("signs sha256:0123"), "{err}");

        let err = PrivateKey::generate()
            .write(
                &dir.path().join("alice.key"),
                &dir.path().join("x.pub"),
                false,
            )
            .unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        let err = PublicKey::load(&dir.path().join("alice.key")).unwrap_err();
        assert!(
            err.to_string().contains("not an ECDSA P-256 public key"),
            "{err}"
        );
    }

    #[test]
    fn the_signature_manifest_has_cosigns_shape() {
        assert_eq!(
            signature_tag(DIGEST),
            format!("sha256-{}.sig", &DIGEST[7..])
        );
        let key = PrivateKey::generate();
        let layer = SignatureLayer::new(&key, "r/x", DIGEST).layer;
        let (manifest, config) = signature_manifest(std::slice::from_ref(&layer));
        assert_eq!(manifest.layers[0].media_type, PAYLOAD_MEDIA_TYPE);
        assert!(
            manifest.layers[0]
                .annotations
                .contains_key(SIGNATURE_ANNOTATION)
        );
        let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
        assert_eq!(config["rootfs"]["diff_ids"][0], layer.digest.as_str());
        let payload: serde_json::Value = serde_json::from_slice(&payload("r/x", DIGEST)).unwrap();
        assert_eq!(
            payload["critical"]["image"]["docker-manifest-digest"],
            DIGEST
        );
        assert_eq!(payload["critical"]["type"], SIGNATURE_TYPE);
    }
}
