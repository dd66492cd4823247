#!/bin/sh
# The CDK CLI runs this (cdk.json: "app") from the repository root and hands
# the app CDK_OUTDIR, CDK_ERROR_FILE and CDK_PERF_COUNTERS_FILE relative to
# the root. The Go app runs in infra/ (its own module) and its jsii runtime
# copies the environment before main starts, so make the paths absolute here.
set -eu
root=$(pwd)
for var in CDK_OUTDIR CDK_ERROR_FILE CDK_PERF_COUNTERS_FILE; do
  eval "value=\${$var:-}"
  case "$value" in
    "" | /*) ;;
    *) export "$var=$root/$value" ;;
  esac
done
# Build the functions first, so `cdk synth` and `cdk deploy` never package
# executables older than the sources (`make functions` is the one
# definition of the build; Go's cache makes an unchanged build quick). The
# app then checks each bootstrap is a static linux/arm64 executable.
# RUNLEDGER_SKIP_BUILD=1 skips the build, for a runledger:codeDir of
# executables built elsewhere.
if [ "${RUNLEDGER_SKIP_BUILD:-}" != 1 ]; then
  echo "runledger: make functions" >&2
  make --no-print-directory -C "$root" functions >&2
fi
cd "$(dirname "$0")"
exec go run .
