#!/bin/bash
set -uxo pipefail
source /opt/miniconda3/bin/activate
conda activate testbed
cd /testbed
git config --global --add safe.directory /testbed
git status
git show --stat
git -c core.fileMode=false diff ec6121cce345c1fa3b82c3140afef7fb648e5808
git checkout ec6121cce345c1fa3b82c3140afef7fb648e5808 tests/test_evaluator.py
git apply --verbose - <<'POLAR_TEST_PATCH_EOF'
diff --git a/tests/test_evaluator.py b/tests/test_evaluator.py
index a92c6c5..9e2ff27 100644
--- a/tests/test_evaluator.py
+++ b/tests/test_evaluator.py
@@ -53,3 +53,15 @@ def test_trailing_tokens():
 def test_unbalanced_parenthesis():
     with pytest.raises(ParseError):
         evaluate("(1 + 2")
+
+
+def test_subtraction_is_left_associative():
+    assert evaluate("10 - 4 - 3") == 3
+
+
+def test_addition_and_subtraction_mix_from_the_left():
+    assert evaluate("2 - 3 + 4") == 3
+
+
+def test_a_long_chain():
+    assert evaluate("100 - 1 - 2 - 3 - 4 + 5") == 95
POLAR_TEST_PATCH_EOF
: '>>>>> Start Test Output'
pytest --no-header -rA --tb=no -p no:cacheprovider tests/test_evaluator.py
: '>>>>> End Test Output'
git checkout ec6121cce345c1fa3b82c3140afef7fb648e5808 tests/test_evaluator.py
