#!/bin/sh
# Bazel workspace status: the commit `densegate version` reports.
sha=$(git rev-parse --verify -q HEAD 2>/dev/null) || sha=unknown
if [ "$sha" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then
  sha="$sha-dirty"
fi
echo "STABLE_GIT_SHA $sha"
