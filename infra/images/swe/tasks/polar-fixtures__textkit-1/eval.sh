#!/bin/bash
set -uxo pipefail
source /opt/miniconda3/bin/activate
conda activate testbed
cd /testbed
git config --global --add safe.directory /testbed
git status
git show --stat
git -c core.fileMode=false diff 3315756455522fae9cf29b585699f0073f11919d
git checkout 3315756455522fae9cf29b585699f0073f11919d tests/test_slug.py
rm -f tests/test_slug_runs.py
git apply --verbose - <<'POLAR_TEST_PATCH_EOF'
diff --git a/tests/test_slug.py b/tests/test_slug.py
index 9991111..7f1361e 100644
--- a/tests/test_slug.py
+++ b/tests/test_slug.py
@@ -19,3 +19,7 @@ def test_no_separator_at_the_ends():
 
 def test_non_ascii_letters_are_letters():
     assert slugify("Crème Brûlée") == "crème-brûlée"
+
+
+def test_leading_and_trailing_punctuation_is_dropped():
+    assert slugify("...Hello!?") == "hello"
diff --git a/tests/test_slug_runs.py b/tests/test_slug_runs.py
new file mode 100644
index 0000000..a9e5120
--- /dev/null
+++ b/tests/test_slug_runs.py
@@ -0,0 +1,13 @@
+from textkit import slugify
+
+
+def test_punctuation_and_spaces_make_one_separator():
+    assert slugify("Hello,  World!") == "hello-world"
+
+
+def test_a_run_of_dashes_makes_one_separator():
+    assert slugify("a -- b") == "a-b"
+
+
+def test_runs_with_another_separator():
+    assert slugify("x . y", separator="_") == "x_y"
POLAR_TEST_PATCH_EOF
: '>>>>> Start Test Output'
pytest --no-header -rA --tb=no -p no:cacheprovider tests/test_slug.py tests/test_slug_runs.py
: '>>>>> End Test Output'
git checkout 3315756455522fae9cf29b585699f0073f11919d tests/test_slug.py
rm -f tests/test_slug_runs.py
