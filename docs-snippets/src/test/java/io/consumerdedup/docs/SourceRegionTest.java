package io.consumerdedup.docs;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** What a snippet marker names: a whole file, a region in parts, or regions joined. */
class SourceRegionTest {
  @TempDir Path root;

  @Test
  void aRegionInPartsIsJoinedAndDedentedTogetherWithoutTagLinesOrDoubleBlankLines()
      throws Exception {
    Files.writeString(
        root.resolve("A.java"),
        """
        package a;

        // tag::r[]
        class A {
          int x;

          // end::r[]
          int hidden;
          // tag::r[]

          // tag::other[]
          int y;
          // end::other[]
        }
        // end::r[]
        """);

    assertThat(SourceRegion.read(root, "A.java#r")).isEqualTo("class A {\n  int x;\n\n  int y;\n}");
    assertThat(SourceRegion.read(root, "A.java#other,r"))
        .isEqualTo("int y;\n\nclass A {\n  int x;\n\n  int y;\n}");
    assertThat(SourceRegion.read(root, "A.java")).startsWith("package a;").endsWith("// end::r[]");
  }

  @Test
  void aMissingFileOrRegionIsNamed() throws Exception {
    Files.writeString(root.resolve("B.java"), "// tag::open[]\nclass B {}\n");

    assertThatThrownBy(() -> SourceRegion.read(root, "C.java#r"))
        .hasMessageContaining("no file C.java");
    assertThatThrownBy(() -> SourceRegion.read(root, "B.java#r"))
        .hasMessageContaining("no region tag::r[]");
    assertThatThrownBy(() -> SourceRegion.read(root, "B.java#open"))
        .hasMessageContaining("never ended by end::open[]");
  }
}
