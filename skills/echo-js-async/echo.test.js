import { test } from "node:test";
import assert from "node:assert/strict";
import { SkillError, echo } from "./echo.js";

test("repeats and counts characters", () => {
  assert.deepEqual(echo("héllo ", 3), { message: "héllo héllo héllo ", length: 18 });
});

test("zero repeats give an empty message", () => {
  assert.deepEqual(echo("abc", 0), { message: "", length: 0 });
});

test("refuses huge outputs", () => {
  assert.throws(() => echo("0123456789", 200000), (e) => e instanceof SkillError && e.code === "invalid-input");
});
