package io.consumerdedup.examples;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class DemoOptionsTest {

  @Test
  void environmentPointsAtRealServersAndFlagsWin() {
    DemoOptions options =
        DemoOptions.parse(
            new String[] {"--kafka-bootstrap=broker:9092"},
            Map.of(
                DemoOptions.KAFKA_VARIABLE, "env-broker:9092",
                DemoOptions.JDBC_VARIABLE, "jdbc:postgresql://db/app?user=u"));

    assertThat(options.bootstrapServers()).isEqualTo("broker:9092");
    assertThat(options.jdbcUrl()).isEqualTo("jdbc:postgresql://db/app?user=u");
  }

  @Test
  void withNothingSetEverythingIsEmbedded() {
    DemoOptions options = DemoOptions.parse(new String[] {""}, Map.of());

    assertThat(options.bootstrapServers()).isNull();
    assertThat(options.jdbcUrl()).isNull();
    assertThat(options.fast()).isFalse();
    assertThat(options.only()).isEmpty();
  }

  @Test
  void oneArgumentMayHoldSeveralOptionsAsMavenPassesThem() {
    DemoOptions options =
        DemoOptions.parse(new String[] {" --fast  --only=lost-ack,zombie "}, Map.of());

    assertThat(options.fast()).isTrue();
    assertThat(options.only()).containsExactly("lost-ack", "zombie");
    assertThat(Demo.select(options.only()))
        .extracting(s -> s.id())
        .containsExactly("lost-ack", "zombie");
  }

  @Test
  void unknownOptionsAndScenariosAreNamed() {
    assertThatThrownBy(() -> DemoOptions.parse(new String[] {"--kafka=x"}, Map.of()))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("'--kafka=x'");
    assertThatThrownBy(() -> Demo.select(List.of("lost-acks")))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("'lost-acks'");
  }
}
