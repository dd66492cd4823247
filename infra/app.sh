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
cd "$(dirname "$0")"
exec go run .
