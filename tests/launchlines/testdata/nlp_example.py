"""Stand-in for accelerate's examples/nlp_example.py."""
import standin

if __name__ == "__main__":
    standin.run("nlp_example.py")
