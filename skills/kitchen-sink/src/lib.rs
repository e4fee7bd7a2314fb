//! `kitchen-sink`: returns its input unchanged. Its input type has every WIT
//! type kind, so the host's JSON <-> component value bridge can be
//! round-trip tested through a real call.

skillhost_sdk::generate!("kitchen-sink", additional_derives: [PartialEq]);

struct KitchenSink;

impl Guest for KitchenSink {
    skillhost_sdk::manifest! {
        capabilities: [],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Everything) -> Result<Everything, SkillError> {
        Ok(input)
    }
}

export!(KitchenSink);

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Everything {
        Everything {
            a_bool: true,
            a_u8: u8::MAX,
            a_u16: u16::MAX,
            a_u32: u32::MAX,
            a_u64: u64::MAX,
            a_s8: i8::MIN,
            a_s16: i16::MIN,
            a_s32: i32::MIN,
            a_s64: i64::MIN,
            a_f32: 1.5,
            a_f64: -0.25,
            a_char: 'λ',
            a_string: "héllo\n\"world\"".to_string(),
            bytes: vec![0, 1, 254, 255],
            points: vec![Point { x: 1, y: -2 }, Point { x: 3, y: 4 }],
            maybe: Some(7),
            maybe_maybe: Some(None),
            outcome: Err(404),
            unit_ok: Ok(()),
            shape: Shape::Polygon(vec![Point { x: 0, y: 0 }]),
            other_shape: Shape::Empty,
            color: Color::Green,
            permissions: Permissions::READ | Permissions::EXECUTE,
            pair: ("a".to_string(), 9, false),
            nested: Labelled {
                label: "origin".to_string(),
                at: Point { x: 0, y: 0 },
                tags: vec!["x".to_string(), String::new()],
            },
            score: 0.5,
        }
    }

    #[test]
    fn returns_its_input_unchanged() {
        let input = sample();
        assert_eq!(KitchenSink::run(input.clone()), Ok(input));
    }

    #[test]
    fn manifest_needs_no_capability() {
        let m = KitchenSink::manifest();
        assert_eq!(m.id, "kitchen-sink");
        assert_eq!(m.name, "Kitchen Sink");
        assert!(m.capabilities.is_empty());
    }
}
