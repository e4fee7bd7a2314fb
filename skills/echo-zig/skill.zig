//! `echo-zig`: repeats a message, exactly as the Rust `echo` skill does.
//! `c` is the world's C bindings, which `host skill build` generates from
//! wit/ and translates to Zig.

const std = @import("std");
const c = @import("bindings");

/// Larger outputs are refused rather than built.
const max_output_bytes: u64 = 1 << 20;

/// Every string returned to the host is freed by the bindings after the
/// call: return copies made with the C allocator.
fn set(out: *c.echo_string_t, text: []const u8) void {
    c.echo_string_dup_n(out, text.ptr, text.len);
}

export fn exports_echo_manifest(ret: *c.echo_manifest_t) void {
    set(&ret.id, "echo-zig");
    set(&ret.name, "Echo (Zig)");
    set(&ret.version, "0.1.0");
    set(&ret.description, "Repeats a message; the echo skill in Zig");
    const caps: [*]c.echo_string_t = @ptrCast(@alignCast(std.c.malloc(@sizeOf(c.echo_string_t)).?));
    set(&caps[0], "log");
    ret.capabilities = .{ .ptr = caps, .len = 1 };
    ret.retry = .{ .max_attempts = 1, .initial_backoff_ms = 0 };
    ret.estimated_duration_ms = 1;
}

/// Unicode scalar values in UTF-8 `text` (the host hands over valid UTF-8).
fn chars(text: []const u8) u32 {
    var n: u32 = 0;
    for (text) |b| n += @intFromBool(b & 0xC0 != 0x80);
    return n;
}

export fn exports_echo_run(input: *c.echo_input_t, ret: *c.echo_output_t, err: *c.echo_skill_error_t) bool {
    defer c.echo_input_free(input);
    const message = input.message.ptr[0..input.message.len];
    const total: u64 = @as(u64, message.len) * input.repeat;
    var buf: [160]u8 = undefined;
    if (total > max_output_bytes) {
        const text = std.fmt.bufPrint(&buf, "{d} bytes repeated {d} times is {d} bytes, more than {d}", .{ message.len, input.repeat, total, max_output_bytes }) catch unreachable;
        set(&err.code, "invalid-input");
        set(&err.message, text);
        err.retryable = false;
        return false;
    }
    // At most 1 MiB: fits the 32-bit address space.
    const size: usize = @intCast(total);
    const out: [*]u8 = @ptrCast(std.c.malloc(@max(size, 1)).?);
    var i: usize = 0;
    while (i < input.repeat) : (i += 1) @memcpy(out[i * message.len ..][0..message.len], message);
    ret.message = .{ .ptr = out, .len = size };
    ret.length = chars(out[0..size]);
    const line = std.fmt.bufPrint(&buf, "echo: {d} characters", .{ret.length}) catch unreachable;
    var log_line: c.echo_string_t = .{ .ptr = @constCast(line.ptr), .len = line.len };
    c.skillhost_skill_log_log(c.SKILLHOST_SKILL_LOG_LEVEL_INFO, &log_line);
    return true;
}
