#!/bin/bash
set -uxo pipefail
source /opt/miniconda3/bin/activate
conda activate testbed
cd /testbed
git config --global --add safe.directory /testbed
git status
git show --stat
git -c core.fileMode=false diff 632a12f453a70e0a256ce6b3fdfbaa48a969ee0c
git checkout 632a12f453a70e0a256ce6b3fdfbaa48a969ee0c tests/test_parser.py
git apply --verbose - <<'POLAR_TEST_PATCH_EOF'
diff --git a/tests/test_parser.py b/tests/test_parser.py
index 234e1e1..38eba25 100644
--- a/tests/test_parser.py
+++ b/tests/test_parser.py
@@ -16,6 +16,15 @@ def test_comments_and_blank_lines_are_skipped():
     assert parse("# a comment\n; another\n\n[a]\nx = 1\n") == {"a": {"x": "1"}}
 
 
+def test_a_value_may_contain_equals_signs():
+    assert parse("[db]\nurl = postgres://h/db?sslmode=require&x=1\n") == {
+        "db": {"url": "postgres://h/db?sslmode=require&x=1"}}
+
+
+def test_only_the_first_equals_sign_splits():
+    assert parse("expr = a == b\n") == {"": {"expr": "a == b"}}
+
+
 def test_empty_value():
     assert parse("[a]\nx =\n") == {"a": {"x": ""}}
 
POLAR_TEST_PATCH_EOF
: '>>>>> Start Test Output'
pytest --no-header -rA --tb=no -p no:cacheprovider tests/test_parser.py
: '>>>>> End Test Output'
git checkout 632a12f453a70e0a256ce6b3fdfbaa48a969ee0c tests/test_parser.py
