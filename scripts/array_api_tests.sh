#!/usr/bin/env bash
# Runs the Array API conformance suite (data-apis/array-api-tests) against lazygraph.
#
#   scripts/array_api_tests.sh                      # every test file, extensions included, 20 examples
#   MAX_EXAMPLES=5 scripts/array_api_tests.sh       # quicker
#   scripts/array_api_tests.sh array_api_tests/test_array_object.py -x   # extra pytest args
#
# scripts/array_api_xfails.txt lists the tests expected to fail and why (pass --xfails-file
# /dev/null to run them as ordinary tests).
#
# The suite is cloned (shallow, with the array-api spec commit it pins as a submodule) into
# ${ARRAY_API_TESTS_DIR:-/tmp/array-api-tests}, outside the project, or reused from there; nothing of
# it is ever part of this repository. ARRAY_API_TESTS_URL / ARRAY_API_SPEC_URL name other remotes
# (a local mirror, say) when the default ones cannot be reached. Its Python requirements are installed
# into the current interpreter when missing. It needs the network the first time and takes minutes,
# so it is not part of the default test run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${ARRAY_API_TESTS_DIR:-/tmp/array-api-tests}
url=${ARRAY_API_TESTS_URL:-https://github.com/data-apis/array-api-tests}
spec_url=${ARRAY_API_SPEC_URL:-}
py=${PYTHON:-python3}

case "$dir" in
"$here" | "$here"/*)
    echo "ARRAY_API_TESTS_DIR must lie outside the project ($here)" >&2
    exit 2
    ;;
esac

if [[ ! -f "$dir/conftest.py" ]]; then
    echo "cloning $url into $dir" >&2
    rm -rf "$dir"
    git clone --quiet --depth 1 "$url" "$dir"
fi

# the spec stubs the suite reads signatures from: a submodule pinned by the suite's commit
if [[ ! -d "$dir/array-api/src/array_api_stubs" ]]; then
    pinned=$(git -C "$dir" ls-tree HEAD array-api | awk '{print $3}')
    if [[ -n "$spec_url" ]]; then
        rm -rf "$dir/array-api"
        git clone --quiet "$spec_url" "$dir/array-api"
        git -C "$dir/array-api" checkout --quiet "$pinned"
    else
        git -C "$dir" submodule update --init --depth 1 --quiet array-api ||
            git -C "$dir" submodule update --init --quiet array-api
    fi
fi

if ! "$py" -c "import hypothesis, ndindex, pytest, pytest_jsonreport" 2>/dev/null; then
    echo "installing the suite's requirements into $py" >&2
    "$py" -m pip install --quiet -r "$dir/requirements.txt"
fi

cd "$dir"
export ARRAY_API_TESTS_MODULE=lazygraph
export ARRAY_API_TESTS_VERSION=${ARRAY_API_TESTS_VERSION:-2024.12}
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
# every test file unless the extra args name some
args=("$@")
named=0
for a in "${args[@]}"; do [[ "$a" == array_api_tests* || "$a" == meta_tests* ]] && named=1; done
[[ $named = 1 ]] || args=(array_api_tests/ "${args[@]}")
# the tests lazygraph fails for reasons the standard allows, each explained in the file
given=0
for a in "${args[@]}"; do [[ "$a" == --xfails-file* ]] && given=1; done
xfails=()
[[ $given = 1 ]] || xfails=("--xfails-file=$here/scripts/array_api_xfails.txt")
exec "$py" -m pytest -q -p no:cacheprovider --continue-on-collection-errors --max-examples "${MAX_EXAMPLES:-20}" \
    "${xfails[@]}" "${args[@]}"
