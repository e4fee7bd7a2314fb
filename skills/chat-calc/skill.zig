//! `chat-calc`: evaluates an arithmetic expression by recursive descent, in
//! Zig (`c` is the world's C bindings, which `host skill build` generates
//! from wit/ and translates to Zig):
//!
//!     expr  = term (("+" | "-") term)*
//!     term  = unary (("*" | "/" | "%") unary)*
//!     unary = "-" unary | power
//!     power = atom ("^" unary)?          (right associative)
//!     atom  = number | "(" expr ")"
//!
//! Bounded: 1,000 characters, parentheses 64 deep, and a result that must
//! be a finite number. Positions in messages count Unicode characters.

const std = @import("std");
const c = @import("bindings");

const max_chars: usize = 1000;
const max_depth: usize = 64;

/// Every string returned to the host is freed by the bindings after the
/// call: return copies made with the C allocator.
fn set(out: *c.chat_calc_string_t, text: []const u8) void {
    c.chat_calc_string_dup_n(out, text.ptr, text.len);
}

export fn exports_chat_calc_manifest(ret: *c.chat_calc_manifest_t) void {
    set(&ret.id, "chat-calc");
    set(&ret.name, "Calculator (Zig)");
    set(&ret.version, "0.1.0");
    set(&ret.description, "Evaluates an arithmetic expression: + - * / % ^ and parentheses over decimal numbers");
    ret.capabilities = .{ .ptr = null, .len = 0 };
    ret.retry = .{ .max_attempts = 1, .initial_backoff_ms = 0 };
    ret.estimated_duration_ms = 1;
}

/// Unicode scalar values in the first `n` bytes of `text`.
fn chars(text: []const u8) usize {
    var n: usize = 0;
    for (text) |b| n += @intFromBool(b & 0xC0 != 0x80);
    return n;
}

const Parser = struct {
    s: []const u8,
    at: usize = 0,
    depth: usize = 0,
    /// What is wrong, once an error is returned.
    message: []const u8 = "",
    buf: [256]u8 = undefined,

    fn fail(p: *Parser, comptime fmt: []const u8, args: anytype) error{Invalid} {
        p.message = std.fmt.bufPrint(&p.buf, fmt, args) catch "the expression is not valid";
        return error.Invalid;
    }

    /// The 1-based character position of byte `at`.
    fn position(p: *const Parser, at: usize) usize {
        return chars(p.s[0..at]) + 1;
    }

    fn peek(p: *Parser) ?u8 {
        while (p.at < p.s.len and std.ascii.isWhitespace(p.s[p.at])) p.at += 1;
        return if (p.at < p.s.len) p.s[p.at] else null;
    }

    fn eat(p: *Parser, ch: u8) bool {
        if (p.peek() == ch) {
            p.at += 1;
            return true;
        }
        return false;
    }

    fn expr(p: *Parser) error{Invalid}!f64 {
        var value = try p.term();
        while (true) {
            if (p.eat('+')) {
                value += try p.term();
            } else if (p.eat('-')) {
                value -= try p.term();
            } else return value;
        }
    }

    fn term(p: *Parser) error{Invalid}!f64 {
        var value = try p.unary();
        while (true) {
            const op = p.peek() orelse return value;
            if (op != '*' and op != '/' and op != '%') return value;
            const at = p.position(p.at);
            p.at += 1;
            const rhs = try p.unary();
            if (op != '*' and rhs == 0.0) return p.fail("division by zero at character {d}", .{at});
            value = switch (op) {
                '*' => value * rhs,
                '/' => value / rhs,
                else => @rem(value, rhs),
            };
        }
    }

    fn unary(p: *Parser) error{Invalid}!f64 {
        if (p.eat('-')) return -(try p.nested(unary));
        return p.power();
    }

    fn power(p: *Parser) error{Invalid}!f64 {
        const base = try p.atom();
        if (p.eat('^')) {
            const exponent = try p.nested(unary);
            return std.math.pow(f64, base, exponent);
        }
        return base;
    }

    /// Runs `f` one level deeper, refusing past `max_depth`.
    fn nested(p: *Parser, comptime f: fn (*Parser) error{Invalid}!f64) error{Invalid}!f64 {
        p.depth += 1;
        if (p.depth > max_depth) return p.fail("nested more than {d} deep", .{max_depth});
        const value = try f(p);
        p.depth -= 1;
        return value;
    }

    fn atom(p: *Parser) error{Invalid}!f64 {
        const ch = p.peek() orelse return p.fail("the expression ends where a number was expected", .{});
        if (ch == '(') {
            const open = p.position(p.at);
            p.at += 1;
            const value = try p.nested(expr);
            if (!p.eat(')')) return p.fail("the `(` at character {d} is not closed", .{open});
            return value;
        }
        if (std.ascii.isDigit(ch) or ch == '.') {
            const start = p.at;
            while (p.at < p.s.len and (std.ascii.isDigit(p.s[p.at]) or p.s[p.at] == '.')) p.at += 1;
            const text = p.s[start..p.at];
            const dots = std.mem.count(u8, text, ".");
            if (dots > 1 or std.mem.eql(u8, text, ".")) {
                return p.fail("`{s}` at character {d} is not a number", .{ text, p.position(start) });
            }
            return std.fmt.parseFloat(f64, text) catch
                p.fail("`{s}` at character {d} is not a number", .{ text, p.position(start) });
        }
        // The whole character, not its first byte.
        var end = p.at + 1;
        while (end < p.s.len and p.s[end] & 0xC0 == 0x80) end += 1;
        return p.fail("unexpected `{s}` at character {d}", .{ p.s[p.at..end], p.position(p.at) });
    }
};

/// The value of `expression`, or the parser's message.
fn evaluate(p: *Parser) error{Invalid}!f64 {
    if (std.mem.trim(u8, p.s, " \t\r\n").len == 0) return p.fail("the expression is empty", .{});
    if (chars(p.s) > max_chars) return p.fail("the expression is over {d} characters", .{max_chars});
    const value = try p.expr();
    if (p.peek()) |_| {
        var end = p.at + 1;
        while (end < p.s.len and p.s[end] & 0xC0 == 0x80) end += 1;
        return p.fail("unexpected `{s}` at character {d}", .{ p.s[p.at..end], p.position(p.at) });
    }
    if (!std.math.isFinite(value)) return p.fail("the result is not a finite number (`{s}`)", .{p.s});
    return value;
}

/// An integer without a decimal point; else at most 12 significant digits,
/// trailing zeros dropped.
fn format(buf: []u8, value: f64) []const u8 {
    if (value == @trunc(value) and @abs(value) < 1e15) {
        return std.fmt.bufPrint(buf, "{d}", .{@as(i64, @intFromFloat(value))}) catch unreachable;
    }
    const magnitude: i32 = @intFromFloat(std.math.clamp(@floor(std.math.log10(@abs(value))), -20.0, 11.0));
    const digits: usize = @intCast(@max(11 - magnitude, 0));
    var text: []const u8 = "";
    inline for (0..32) |precision| {
        if (precision == digits) {
            text = std.fmt.bufPrint(buf, std.fmt.comptimePrint("{{d:.{d}}}", .{precision}), .{value}) catch unreachable;
        }
    }
    if (std.mem.indexOfScalar(u8, text, '.') != null) {
        text = std.mem.trimEnd(u8, text, "0");
        text = std.mem.trimEnd(u8, text, ".");
    }
    return text;
}

export fn exports_chat_calc_run(input: *c.chat_calc_input_t, ret: *c.chat_calc_output_t, err: *c.chat_calc_skill_error_t) bool {
    defer c.chat_calc_input_free(input);
    const expression = input.expression.ptr[0..input.expression.len];
    var parser = Parser{ .s = expression };
    const value = evaluate(&parser) catch {
        set(&err.code, "invalid-input");
        set(&err.message, parser.message);
        err.retryable = false;
        return false;
    };
    var buf: [64]u8 = undefined;
    set(&ret.expression, expression);
    ret.value = value;
    set(&ret.text, format(&buf, value));
    return true;
}
