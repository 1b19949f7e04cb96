from iipub.cli import main

main()
