#!/bin/sh
# Per-file pass/fail counts of the candle-device-tests binary, from libtest's output.
#
#   cargo test -p candle-device-tests 2>&1 | candle-tests/count.sh
#   candle-tests/count.sh test.log [more.log ...]
#
# Test names: `<file>::<test>::ext` runs on the ext device (CANDLE_EXT_TEST_DEVICE), `<file>::<test>_cpu`
# is Candle's own CPU run (Device::Cpu), anything else is a plain #[test] of the file ("other": Candle's
# device-independent tests and the harness's own). Exception: in quantized_tests, 14 CPU-only #[test]s
# are named `*_cpu` too and land in the cpu columns (its ::ext tests are #[ignore]d unless
# --include-ignored: see README.md). Failing tests are listed under the table.
set -eu
awk '
/^test .* \.\.\. (ok|FAILED|ignored)/ {
    # The word after "...": `ignored` may go on with a reason (`ignored, needs ...`).
    name = $2; result = ""
    for (i = 3; i < NF; i++) if ($i == "...") { result = $(i + 1); break }
    sub(/,$/, "", result)
    n = split(name, part, "::")
    file = part[1]
    if (part[n] == "ext") kind = "ext"
    else if (n == 2 && part[2] ~ /_cpu$/) kind = "cpu"
    else kind = "other"
    if (!(file in seen)) { seen[file] = 1; order[++files] = file }
    count[file, kind, result]++
    total[kind, result]++
    if (result == "FAILED") failed[++nfailed] = name
}
function row(label, c_eo, c_ef, c_ei, c_co, c_cf, c_oo, c_of) {
    printf "| %-15s | %10d | %10d | %11d | %10d | %10d | %12d | %12d |\n", label, c_eo, c_ef, c_ei, c_co, c_cf, c_oo, c_of
}
END {
    if (files == 0) { print "count.sh: no libtest result lines (`test NAME ... ok|FAILED|ignored`) in the input" > "/dev/stderr"; exit 1 }
    printf "| %-15s | %10s | %10s | %11s | %10s | %10s | %12s | %12s |\n", "file", "ext passed", "ext failed", "ext ignored", "cpu passed", "cpu failed", "other passed", "other failed"
    print "|-----------------|-----------:|-----------:|------------:|-----------:|-----------:|-------------:|-------------:|"
    for (i = 1; i <= files; i++) {
        f = order[i]
        row(f, count[f, "ext", "ok"], count[f, "ext", "FAILED"], count[f, "ext", "ignored"], count[f, "cpu", "ok"], count[f, "cpu", "FAILED"], count[f, "other", "ok"], count[f, "other", "FAILED"])
    }
    row("total", total["ext", "ok"], total["ext", "FAILED"], total["ext", "ignored"], total["cpu", "ok"], total["cpu", "FAILED"], total["other", "ok"], total["other", "FAILED"])
    if (nfailed > 0) {
        print ""
        print "failed:"
        for (i = 1; i <= nfailed; i++) print "  " failed[i]
    }
}
' "$@"
